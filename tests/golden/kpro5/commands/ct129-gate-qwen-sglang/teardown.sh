# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=ct129-gate-qwen-sglang]
# The deploy gate only measures: nothing to remove.
say "nothing to remove"
finish
