# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=preflight]
# The probe of preflight: reads the host and changes nothing; prints one facts line.
emit_facts
