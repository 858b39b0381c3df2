# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=preflight]
# The probe of preflight: reads the host and changes nothing; prints one facts line.
emit_facts
