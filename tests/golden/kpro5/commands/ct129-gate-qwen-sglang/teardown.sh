# managed by gpuhosts — unit ct129-gate-qwen-sglang; generated from templates/, do not edit on the host.
# Runs the script below inside container 129 (pct exec).
set -euo pipefail
vmid=129
status="$(pct status "$vmid" 2>/dev/null | awk '{print $2}')" || true
if [ -z "$status" ]; then
  printf '%s: container %s does not exist any more; nothing to remove in it\n' ct129-gate-qwen-sglang "$vmid"
  printf '%s\n' 'GPUHOSTS_RESULT {"changed":false,"rebootRequired":false}'
  exit 0
fi
if [ "$status" != running ]; then
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-gate-qwen-sglang "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:24e549ce7da88918 unit=ct129-gate-qwen-sglang]
# Inside container 129: the deploy gate only measures; what it keeps is the record of its last pass.
remove_file /var/lib/gpuhosts/gates/ct129-gate-qwen-sglang
# The records' directories go with the last record.
rmdir "$root"/var/lib/gpuhosts/gates "$root"/var/lib/gpuhosts 2>/dev/null || true
finish
GPUHOSTS_INNER
)"
pct exec "$vmid" -- bash -c "$script" gpuhosts </dev/null
