# managed by gpuhosts — unit ct129-gate-qwen-sglang; generated from templates/, do not edit on the host.
# Runs the script below inside container 129 (pct exec).
set -euo pipefail
vmid=129
# node_name — the name Proxmox files this node under: the kernel's host name cut at the first dot, as
# PVE::INotify::nodename does (`hostname` may print an FQDN).
node_name() {
  local name
  name="$(hostname)"
  printf '%s\n' "${name%%.*}"
}

# ct_status VMID — the container's status from the API, running or stopped (GET
# /nodes/{node}/lxc/{vmid}/status/current: pve-container src/PVE/API2/LXC/Status.pm `vm_status`, which loads the
# config first); fails, printing nothing, when there is no such container.
ct_status() {
  local answer
  answer="$(pvesh get "/nodes/$(node_name)/lxc/$1/status/current" --output-format json)" || return 1
  python3 -I -c 'import json, sys; print(json.load(sys.stdin)["status"])' <<<"$answer"
}
status="$(ct_status "$vmid" 2>/dev/null)" || true
if [ "$status" != running ]; then
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-gate-qwen-sglang "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gate-qwen-sglang]
# Inside container 129: the deploy gate of qwen-sglang (service step 5b650f150b7d783f); fails the deploy below
# its thresholds. The gate script's GPUHOSTS_GATE line becomes the report of the result line: the stack output `services`.
service=qwen-sglang
python=/opt/gpuhosts/qwen-sglang/venv/bin/python
unit_name=gpuhosts-qwen-sglang.service
# What a refresh compares: the inputs of the last gate that passed (its service's step and its settings).
record="$root"/var/lib/gpuhosts/gates/ct129-gate-qwen-sglang
set +e
output="$("$root$python" "$root"/usr/local/lib/gpuhosts/deploy-gate.py '{"acceptance_metrics": {"kind": "gauges", "length": "sglang:spec_accept_length", "rate": "sglang:spec_accept_rate"}, "admin_endpoint": "/flush_cache", "base_url": "http://127.0.0.1:30000", "engine": "sglang", "max_tokens": 256, "min_acceptance_length": 2.0, "min_acceptance_rate": null, "min_decode_tokens_per_s": 20.0, "model": "qwen3.6-27b", "ready_timeout_s": 1800, "reasoning_field": "reasoning_content", "speculative": true, "tool_call": true}' "$root"/etc/gpuhosts/qwen-sglang.env GPUHOSTS_API_KEY)"
status=$?
set -e
grep -v '^GPUHOSTS_GATE ' <<<"$output" || true
result_report="$(sed -n 's/^GPUHOSTS_GATE //p' <<<"$output" | tail -n1)"
if [ "$status" != 0 ]; then
  rm -f "$record"
  say "the last lines of $unit_name's journal:"
  journalctl -u "$unit_name" -n 40 --no-pager 2>/dev/null || true
  refuse "deploy gate of $service failed (see above); the service keeps running for inspection"
fi
mkdir -p "$(dirname "$record")"
printf '%s\n' 'passed with inputs sha256:35fb01baf5699d24' >"$record"
say "deploy gate of $service passed"
finish
GPUHOSTS_INNER
)"
# What the container prints is the container's: any process in it may print a line that looks like gpuhosts'
# protocol. A unit inside a container can neither require the host's reboot nor skip a teardown, so such lines are
# passed on as text, not as what the host reads; a result without a result line then fails the unit, visibly.
from_container() {
  # shellcheck disable=SC2016  # awk's own fields
  awk -v result='GPUHOSTS_RESULT ' -v skipped='GPUHOSTS_SKIPPED ' '
    index($0, skipped) == 1 || (index($0, result) == 1 && ($0 ~ /"rebootRequired":true/ || $0 ~ /awaitReboot/)) {
      print "(printed in the container) " $0; fflush(); next
    }
    { print; fflush() }'
}
pct exec "$vmid" -- bash -c "$script" gpuhosts </dev/null | from_container
