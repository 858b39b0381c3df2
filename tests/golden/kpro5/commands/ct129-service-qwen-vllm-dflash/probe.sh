# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-service-qwen-vllm-dflash]
# The probe of ct129-service-qwen-vllm-dflash: reads the host and changes nothing; prints one facts line.
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
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-service-qwen-vllm-dflash]
# The probe of ct129-service-qwen-vllm-dflash: reads the host and changes nothing; prints one facts line.
# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-qwen-vllm-dflash.service]="$(systemd_show gpuhosts-qwen-vllm-dflash.service)"
keyed_file_state() {
  local target="$root$2"
  [ -f "$target" ] || { echo missing; return 0; }
  printf 'keyed sha256:%s mode:%s (gpuhosts:%s as %s)\n' \
    "$({ printf 'gpuhosts-file\0%s\0' "$1"; cat "$target"; } | sha256sum | cut -c1-16)" "$(stat -c %a "$target")" "$3" "$4"
}
fact 'file /etc/systemd/system/gpuhosts-qwen-vllm-dflash.service' "$( { file_state /etc/systemd/system/gpuhosts-qwen-vllm-dflash.service; } 2>/dev/null || true)"
fact 'file /usr/local/lib/gpuhosts/deploy-gate.py' "$( { file_state /usr/local/lib/gpuhosts/deploy-gate.py; } 2>/dev/null || true)"
fact 'systemd gpuhosts-qwen-vllm-dflash.service' "$( { systemd_state gpuhosts-qwen-vllm-dflash.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-qwen-vllm-dflash.service' "$( { systemd_exec gpuhosts-qwen-vllm-dflash.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-qwen-vllm-dflash.service' "$( { systemd_property_of Environment gpuhosts-qwen-vllm-dflash.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-qwen-vllm-dflash.service' "$( { systemd_property_of User gpuhosts-qwen-vllm-dflash.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-qwen-vllm-dflash.service' "$( { systemd_dropins gpuhosts-qwen-vllm-dflash.service; } 2>/dev/null || true)"
fact 'key file /etc/gpuhosts/qwen-vllm-dflash.env' "$( { keyed_file_state ct129-service-qwen-vllm-dflash /etc/gpuhosts/qwen-vllm-dflash.env llmApiKey VLLM_API_KEY; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
if [ -n "$inner_facts" ]; then
  probe_facts+="${probe_facts:+,}$inner_facts"
else
  container_state="$(ct_status "$probed_vmid" 2>/dev/null)" || true
  fact 'file /etc/systemd/system/gpuhosts-qwen-vllm-dflash.service' "container $probed_vmid ${container_state:-missing}"
  fact 'file /usr/local/lib/gpuhosts/deploy-gate.py' "container $probed_vmid ${container_state:-missing}"
  fact 'systemd gpuhosts-qwen-vllm-dflash.service' "container $probed_vmid ${container_state:-missing}"
  fact 'ExecStart of gpuhosts-qwen-vllm-dflash.service' "container $probed_vmid ${container_state:-missing}"
  fact 'Environment of gpuhosts-qwen-vllm-dflash.service' "container $probed_vmid ${container_state:-missing}"
  fact 'User of gpuhosts-qwen-vllm-dflash.service' "container $probed_vmid ${container_state:-missing}"
  fact 'DropInPaths of gpuhosts-qwen-vllm-dflash.service' "container $probed_vmid ${container_state:-missing}"
  fact 'key file /etc/gpuhosts/qwen-vllm-dflash.env' "container $probed_vmid ${container_state:-missing}"
fi
emit_facts
