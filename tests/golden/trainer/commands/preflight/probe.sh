# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=preflight]
# The probe of preflight: reads the host and changes nothing; prints one facts line.
preflight_gpus="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" || true
fact GPUs "$( { awk -F", *" -v model='RTX PRO 6000' -v want=8 'NF { n++; if (index($1, model)) m++; else other = other ", " $1 } END { if (!n) print "no GPU"; else if (m >= want && !other) print "at least " want " × " model; else print m + 0 " × " model other " (the stack needs " want ")" }' <<<"$preflight_gpus"; } 2>/dev/null || true)"
fact driver "$( { awk -F", *" 'NF { print $2 }' <<<"$preflight_gpus" | sort -u | paste -sd " " - | grep . || echo none; } 2>/dev/null || true)"
emit_facts
