# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gate-qwen-sglang]
# The probe of ct129-gate-qwen-sglang: reads the host and changes nothing; prints one facts line.
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
# Inside container 129, in one pct exec (which fails on a container that is not running: then each of its
# facts says so).
probed_vmid=129
inner_facts="$(pct exec "$probed_vmid" -- bash -c "$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gate-qwen-sglang]
# The probe of ct129-gate-qwen-sglang: reads the host and changes nothing; prints one facts line.
gate_recheck="$("$root"/opt/gpuhosts/qwen-sglang/venv/bin/python "$root"/usr/local/lib/gpuhosts/deploy-gate.py --recheck '{"acceptance_metrics": {"kind": "gauges", "length": "sglang:spec_accept_length", "rate": "sglang:spec_accept_rate"}, "admin_endpoint": "/flush_cache", "base_url": "http://127.0.0.1:30000", "engine": "sglang", "max_tokens": 256, "min_acceptance_length": 2.0, "min_acceptance_rate": null, "min_decode_tokens_per_s": 20.0, "model": "qwen3.6-27b", "ready_timeout_s": 1800, "reasoning_field": "reasoning_content", "speculative": true, "tool_call": true}' "$root"/etc/gpuhosts/qwen-sglang.env GPUHOSTS_API_KEY 2>/dev/null)" || true
fact 'health of qwen-sglang' "$( { sed -n "s/^health: //p" <<<"$gate_recheck" | grep . || echo 'not read (the gate script did not run)'; } 2>/dev/null || true)"
fact 'model served by qwen-sglang' "$( { sed -n "s/^model: //p" <<<"$gate_recheck" | grep . || echo 'not read (the gate script did not run)'; } 2>/dev/null || true)"
fact 'gate record /var/lib/gpuhosts/gates/ct129-gate-qwen-sglang' "$( { cat "$root"/var/lib/gpuhosts/gates/ct129-gate-qwen-sglang || echo missing; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
if [ -n "$inner_facts" ]; then
  probe_facts+="${probe_facts:+,}$inner_facts"
else
  container_state="$(ct_status "$probed_vmid" 2>/dev/null)" || true
  fact 'health of qwen-sglang' "container $probed_vmid ${container_state:-missing}"
  fact 'model served by qwen-sglang' "container $probed_vmid ${container_state:-missing}"
  fact 'gate record /var/lib/gpuhosts/gates/ct129-gate-qwen-sglang' "container $probed_vmid ${container_state:-missing}"
fi
emit_facts
