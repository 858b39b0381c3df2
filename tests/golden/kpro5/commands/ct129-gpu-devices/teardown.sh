# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gpu-devices]
# [templates/lxc_gpu_passthrough/container.sh.j2 sha256:d10200d97fad05ca vmid=129 allow_restart=true]

if ! pct config "$vmid" >/dev/null 2>&1; then
  say "container $vmid is gone; nothing to remove"
  rm -f "$owned"
  finish
  exit 0
fi
devices_changed=0
if [ -f "$owned" ]; then
  mapfile -t dev_going < <(cut -d' ' -f1 "$owned")
  dev_nodes_ready
  entries="$(dev_entries)"
  current="$(dev_entries_current)"
  while read -r key path; do
    [ -n "$key" ] || continue
    if grep -qxF "$key"$'\t'"$path" <<<"$entries"; then
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
    fi
  done <"$owned"
  rm -f "$owned"
fi
if [ "$devices_changed" = 1 ] || owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  with_lock "ct-$vmid" restart_if_running
fi
rmdir "$state_dir" 2>/dev/null || true
finish
