# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gate-qwen-sglang]
# The deploy gate only measures: nothing to remove.
say "nothing to remove"
finish
