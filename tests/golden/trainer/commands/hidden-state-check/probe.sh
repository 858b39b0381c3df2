# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=hidden-state-check]
# The probe of hidden-state-check: reads the host and changes nothing; prints one facts line.
emit_facts
