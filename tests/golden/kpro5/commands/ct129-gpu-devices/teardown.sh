# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gpu-devices]
# [templates/common/container.sh.j2 sha256:138093b4bc2d324f vmid=129 allow_restart=true]

gpus=(0000:41:00.0 0000:61:00.0)

if ! ct_status "$vmid" >/dev/null 2>&1; then
  say "container $vmid is gone; nothing to remove"
  rm -f "$owned"
  finish
  exit 0
fi

# Which entries go is read from the container's config, by path: every devN naming a node this unit gives — each
# declared GPU's /dev/nvidia<minor> (the minor the driver reports now), /dev/nvidiactl and the uvm pair. The
# ownership record only adds the node of a GPU whose minor the driver no longer reports (moved off nvidia since),
# and never the node of a GPU the driver holds for someone else; so a record cut short or lost leaves none of our
# entries behind, and no line of it makes teardown remove another entry.
ours=(/dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools)
for address in "${gpus[@]}"; do
  minor="$(gpu_minor "$address")"
  [ -z "$minor" ] || ours+=("/dev/nvidia$minor")
done
others=" "
for info in "$root"/proc/driver/nvidia/gpus/*/information; do
  [ -e "$info" ] || continue
  address="$(basename "$(dirname "$info")")"
  case " ${gpus[*]} " in *" $address "*) continue ;; esac
  others+="/dev/nvidia$(gpu_minor "$address") "
done
if [ -f "$owned" ]; then
  while read -r _key path; do
    if [[ "$path" =~ ^/dev/nvidia[0-9]+$ ]] && [[ "$others" != *" $path "* ]]; then
      ours+=("$path")
    fi
  done <"$owned"
fi
is_ours() {
  local node
  for node in "${ours[@]}"; do
    [ "$node" != "$1" ] || return 0
  done
  return 1
}

devices_changed=0
entries="$(dev_entries)"
current="$(dev_entries_current)"
going=()
while IFS=$'\t' read -r key path; do
  if [ -n "$key" ] && is_ours "$path"; then
    going+=("$key")
  fi
done <<<"$entries"
if [ "${#going[@]}" -gt 0 ]; then
  dev_going=("${going[@]}")
  dev_nodes_ready
fi
for key in "${going[@]}"; do
  path="$(awk -F '\t' -v k="$key" '$1 == k {print $2; exit}' <<<"$entries")"
  owe "ct-$vmid-restart"
  if grep -qxF "$key"$'\t'"$path" <<<"$current"; then
    # on a running container the removal waits for its next start (pve-container does not hot-unplug)
    ct_set --delete "$key"
  else
    ct_set --revert "$key"  # only pending so far: --delete would leave it pending
  fi
  devices_changed=1
  if container_running && grep -qxF "$key"$'\t'"$path" <<<"$(dev_entries_current)"; then
    note_change "removed $key ($path) from container $vmid at its next restart"
  else
    note_change "removed $key ($path) from container $vmid"
  fi
done
rm -f "$owned"
if [ "$devices_changed" = 1 ] || owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  with_lock "ct-$vmid" restart_if_running
fi
rmdir "$state_dir" 2>/dev/null || true
finish
