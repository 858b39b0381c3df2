# managed by gpuhosts — unit ct129-service-qwen-vllm-dflash; generated from templates/, do not edit on the host.
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
if [ -z "$status" ]; then
  printf '%s: container %s does not exist any more; nothing to remove in it\n' ct129-service-qwen-vllm-dflash "$vmid"
  printf '%s\n' 'GPUHOSTS_RESULT {"changed":false,"rebootRequired":false}'
  exit 0
fi
if [ "$status" != running ]; then
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-service-qwen-vllm-dflash "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-service-qwen-vllm-dflash]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Inside container 129: stop and remove service qwen-vllm-dflash; models and environments have their own teardown.
unit_name=gpuhosts-qwen-vllm-dflash.service
systemd_stopped "$unit_name"
remove_file /etc/systemd/system/gpuhosts-qwen-vllm-dflash.service
remove_file /etc/gpuhosts/qwen-vllm-dflash.env
# Files shared by the services go with the last gpuhosts unit; the services' lock makes "the last" one answer.
remove_shared_files() {
  local others=("$root"/etc/systemd/system/gpuhosts-*.service)
  if [ ! -e "${others[0]}" ]; then
    remove_file /usr/local/lib/gpuhosts/sglang-serve.py
    remove_file /usr/local/lib/gpuhosts/deploy-gate.py
    rmdir "$root"/etc/gpuhosts 2>/dev/null || true
    rmdir "$root"/usr/local/lib/gpuhosts 2>/dev/null || true
  fi
}
with_lock services remove_shared_files
[ "$changed" = 0 ] || systemctl daemon-reload
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
