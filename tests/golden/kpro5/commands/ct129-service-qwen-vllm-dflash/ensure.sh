# managed by gpuhosts — unit ct129-service-qwen-vllm-dflash; generated from templates/, do not edit on the host.
# Runs the script below inside container 129 (pct exec), handing it llmApiKey on stdin: the
# secret reaches this command on its stdin and never appears in a command line, a file on the host or the log.
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
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-service-qwen-vllm-dflash "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
secret=""
IFS= read -r secret || true
if [ -z "$secret" ]; then
  printf '%s: refused: %s did not arrive on stdin; set it with pulumi config set --secret\n' ct129-service-qwen-vllm-dflash llmApiKey >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-service-qwen-vllm-dflash]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Inside container 129: the systemd unit of service qwen-vllm-dflash (installed stopped).
unit_name=gpuhosts-qwen-vllm-dflash.service
enabled=false
program=/opt/gpuhosts/qwen-vllm-dflash/venv/bin/vllm
restart=0

[ -x "$root$program" ] || refuse "$program is missing; the service's engine install comes first"
model_dirs=(/srv/models/Qwen3.6-27B /srv/models/Qwen3.6-27B-DFlash)
for dir in "${model_dirs[@]}"; do
  [ -f "$root$dir/.gpuhosts-download" ] || refuse "$dir is not downloaded completely; its download comes first"
done

# The launcher and the gate script are shared with the container's other services, whose teardown removes them
# when it is the last one: installing them and that decision take the same lock.
install_service_files() {
install_file /etc/systemd/system/gpuhosts-qwen-vllm-dflash.service 0644 <<'GPUHOSTS_EOF'
# [content: containers/129/etc/systemd/system/gpuhosts-qwen-vllm-dflash.service sha256:bbd75c62b08e8398]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /usr/local/lib/gpuhosts/deploy-gate.py 0755 <<'GPUHOSTS_EOF'
# [content: containers/129/usr/local/lib/gpuhosts/deploy-gate.py.sha256 sha256:0a15fac49f18579f]
GPUHOSTS_EOF
}
systemd_repair "$unit_name"
[ "$systemd_repaired" = 0 ] || restart=1
with_lock services install_service_files
# The API key: from stdin into a 0600 EnvironmentFile, the only place it is written.
service=qwen-vllm-dflash
IFS= read -r key || true
[ -n "$key" ] || refuse "no API key arrived for $service"
printf '%s=%s\n' VLLM_API_KEY "$key" | install_file /etc/gpuhosts/qwen-vllm-dflash.env 0600
unset key
[ "$file_changed" = 0 ] || restart=1
if [ "$enabled" = true ]; then
  systemd_running "$unit_name" "$restart"
  say "$unit_name is running; the deploy gate checks that it serves"
else
  [ "$restart" = 0 ] || systemctl daemon-reload
  systemd_stopped "$unit_name" "enabled: false"
  say "$unit_name is installed and stopped (enabled: false)"
fi
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
printf '%s\n' "$secret" | pct exec "$vmid" -- bash -c "$script" gpuhosts | from_container
