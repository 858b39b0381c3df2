# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-bench-spec-bakeoff]
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
# The benchmark's scripts leave the container; its results stay on the host, and no service changes state.
vmid=129
scripts=/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff
results=/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff
status="$(ct_status "$vmid" 2>/dev/null)" || true
if [ "$status" = running ]; then
  # shellcheck disable=SC2016  # expanded inside the container
  remove='root="${GPUHOSTS_HOST_ROOT:-}"; if [ -d "$root$1" ]; then rm -rf -- "$root$1"; echo removed; fi'
  if pct exec "$vmid" -- bash -c "$remove" gpuhosts "$scripts" </dev/null | grep -qx removed; then
    note_change "removed $scripts from container $vmid"
  fi
else
  say "container $vmid is ${status:-missing}; nothing to remove in it"
fi
say "results kept in $results on the host"
finish
