# managed by gpuhosts — unit ct129-gate-qwen-sglang; the deploy gate only measures: nothing to remove.
printf '%s: nothing to remove\n' ct129-gate-qwen-sglang
