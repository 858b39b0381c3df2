# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gpu-devices]
# [templates/lxc_gpu_passthrough/container.sh.j2 sha256:d10200d97fad05ca vmid=129 allow_restart=true]

gpus=(0000:41:00.0 0000:61:00.0)
want_hostname=llm

# --- check -------------------------------------------------------------------------------------------------
pct config "$vmid" >/dev/null 2>&1 || refuse "container $vmid does not exist on this host (pct list); fix gpuhosts:containers"
hostname="$(pct config "$vmid" | sed -n 's/^hostname: //p')"
[ "$hostname" = "$want_hostname" ] || say "warning: container $vmid is named '$hostname', the stack says $want_hostname"

wanted=()
for address in "${gpus[@]}"; do
  driver="$(pci_driver "$address")"
  [ "$driver" = nvidia ] || refuse "GPU $address is on '${driver:-no driver}', not nvidia: the vfio binding or a reboot must release it first"
  minor="$(gpu_minor "$address")"
  [ -n "$minor" ] || refuse "the nvidia driver reports no minor for $address (/proc/driver/nvidia/gpus/$address/information)"
  wanted+=("/dev/nvidia$minor")
  say "GPU $address is /dev/nvidia$minor"
done
wanted+=(/dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools)
for node in "${wanted[@]}"; do
  [ -e "$root$node" ] || refuse "host device $node is missing ($(node_fix "$node"); the nvidia-uvm-at-boot unit \
does at every boot); pct would refuse it and the container would not start"
done

# --- act ---------------------------------------------------------------------------------------------------
mkdir -p "$state_dir"
touch "$owned"
restart_owed_before=0
if owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  restart_owed_before=1
fi
devices_changed=0
# has_entry KEY-OR-PATH COLUMN ENTRIES — an entry of ENTRIES ("devN<TAB>path" lines) with that key or path.
has_entry() {
  awk -F '\t' -v want="$1" -v col="$2" '$col == want {found = 1} END {exit !found}' <<<"$3"
}
# Entries of ours that are no longer wanted go; their nodes may be gone already (a GPU moved to vfio-pci).
entries="$(dev_entries)"
dropped=()
while IFS=$'\t' read -r key path; do
  [ -n "$key" ] || continue
  keep=0
  for node in "${wanted[@]}"; do
    [ "$node" != "$path" ] || keep=1
  done
  if [ "$keep" = 0 ] && grep -qxF "$key $path" "$owned"; then
    dropped+=("$key")
  fi
done <<<"$entries"
to_add=()
for node in "${wanted[@]}"; do
  has_entry "$node" 2 "$entries" || to_add+=("$node")
done
if [ "${#dropped[@]}" -gt 0 ] || [ "${#to_add[@]}" -gt 0 ]; then
  dev_going=("${dropped[@]}")
  dev_nodes_ready
fi
for key in "${dropped[@]}"; do
  path="$(awk -F '\t' -v k="$key" '$1 == k {print $2; exit}' <<<"$entries")"
  owe "ct-$vmid-restart"
  if has_entry "$key" 1 "$(dev_entries_current)"; then
    # on a running container the removal waits for its next start (pve-container does not hot-unplug)
    ct_set --delete "$key"
  else
    ct_set --revert "$key"  # only pending so far: --delete would leave it pending
  fi
  awk -v line="$key $path" '$0 != line' "$owned" >"$owned.new" && mv -f "$owned.new" "$owned"
  devices_changed=1
  note_change "removed $key ($path) from container $vmid"
done
for node in "${to_add[@]}"; do
  entries="$(dev_entries)"
  # a free key in both views: a key whose removal is pending is still taken until the next start
  taken="$entries"$'\n'"$(dev_entries_current)"
  index=0
  while has_entry "dev$index" 1 "$taken"; do
    index=$((index + 1))
  done
  owe "ct-$vmid-restart"
  ct_set "--dev$index" "$node"
  printf 'dev%s %s\n' "$index" "$node" >>"$owned"
  devices_changed=1
  note_change "passed $node to container $vmid as dev$index"
done
if [ "$devices_changed" = 1 ] && [ "$restart_owed_before" = 0 ] && container_running \
    && [ "$(dev_entries)" = "$(dev_entries_current)" ]; then
  # pve-container >= 6.0.4 plugs a new devN into a running container: nothing waits for a restart
  settled "ct-$vmid-restart"
  say "container $vmid got its new devices at once (hot-plugged)"
elif [ "$devices_changed" = 1 ] || owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  with_lock "ct-$vmid" restart_if_running
fi

# --- verify ------------------------------------------------------------------------------------------------
entries="$(dev_entries)"
for node in "${wanted[@]}"; do
  has_entry "$node" 2 "$entries" || refuse "container $vmid lacks $node after pct set"
done
finish
