# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-bench-spec-bakeoff]
# The probe of ct129-bench-spec-bakeoff: reads the host and changes nothing; prints one facts line.
fact 'results /var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff' "$( { cat "$root"/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/inputs 2>/dev/null || echo missing; } 2>/dev/null || true)"
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
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-bench-spec-bakeoff]
# The probe of ct129-bench-spec-bakeoff: reads the host and changes nothing; prints one facts line.
fact 'file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py' "$( { file_state /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py; } 2>/dev/null || true)"
fact 'file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json' "$( { file_state /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json; } 2>/dev/null || true)"
fact 'file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py' "$( { file_state /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
if [ -n "$inner_facts" ]; then
  probe_facts+="${probe_facts:+,}$inner_facts"
else
  container_state="$(ct_status "$probed_vmid" 2>/dev/null)" || true
  fact 'file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py' "container $probed_vmid ${container_state:-missing}"
  fact 'file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json' "container $probed_vmid ${container_state:-missing}"
  fact 'file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py' "container $probed_vmid ${container_state:-missing}"
fi
emit_facts
