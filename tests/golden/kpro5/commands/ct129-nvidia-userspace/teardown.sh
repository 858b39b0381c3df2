# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-nvidia-userspace]
# [templates/common/container.sh.j2 sha256:138093b4bc2d324f vmid=129 allow_restart=true]

version=580.126.09
state="$state_dir/ct-$vmid-userspace.state"

# Only user space this unit installed is removed; a container that had its own keeps it.
if [ -f "$state" ] && grep -qx 'previous_userspace=' "$state"; then
  if ! ct_status "$vmid" >/dev/null 2>&1; then
    say "container $vmid is gone; nothing to uninstall"
  elif ! container_running; then
    refuse "container $vmid is stopped, so its NVIDIA user space cannot be removed; start it (pct start $vmid) and destroy again"
  else
    pct exec "$vmid" -- nvidia-uninstall --silent
    note_change "removed NVIDIA user space $version from container $vmid"
  fi
fi
rm -f "$state"
rmdir "$state_dir" 2>/dev/null || true
finish
