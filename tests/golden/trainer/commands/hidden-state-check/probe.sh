# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=hidden-state-check]
# The probe of hidden-state-check: reads the host and changes nothing; prints one facts line.
emit_facts
