# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=ct129-gate-qwen-sglang]
# The probe of ct129-gate-qwen-sglang: reads the host and changes nothing; prints one facts line.
emit_facts
