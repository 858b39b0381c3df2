# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gate-qwen-sglang]
# The probe of ct129-gate-qwen-sglang: reads the host and changes nothing; prints one facts line.
emit_facts
