# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gpu-devices]
# [templates/lxc_gpu_passthrough/container.sh.j2 sha256:09b60c665343649d vmid=129 allow_restart=true]

if ! pct config "$vmid" >/dev/null 2>&1; then
  say "container $vmid is gone; nothing to remove"
  rm -f "$owned"
  finish
  exit 0
fi
devices_changed=0
if [ -f "$owned" ]; then
  while read -r key path; do
    if grep -qx "$key $path" <<<"$(dev_entries)"; then
      owe "ct-$vmid-restart"
      pct set "$vmid" --delete "$key"
      devices_changed=1
      note_change "removed $key ($path) from container $vmid"
    fi
  done <"$owned"
  rm -f "$owned"
fi
if [ "$devices_changed" = 1 ] || owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  with_lock "ct-$vmid" restart_if_running
fi
rmdir "$state_dir" 2>/dev/null || true
finish
