# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gpu-devices]
# [templates/lxc_gpu_passthrough/container.sh.j2 sha256:09b60c665343649d vmid=129 allow_restart=true]

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
  [ -e "$root$node" ] || refuse "host device $node is missing; pct would refuse it and the container would not start"
done

# --- act ---------------------------------------------------------------------------------------------------
mkdir -p "$state_dir"
touch "$owned"
devices_changed=0
while read -r key path; do
  keep=0
  for node in "${wanted[@]}"; do
    [ "$node" != "$path" ] || keep=1
  done
  if [ "$keep" = 0 ] && grep -qx "$key $path" "$owned"; then
    owe "ct-$vmid-restart"
    pct set "$vmid" --delete "$key"
    sed -i "\|^$key $path\$|d" "$owned"
    devices_changed=1
    note_change "removed $key ($path) from container $vmid"
  fi
done < <(dev_entries)
for node in "${wanted[@]}"; do
  if dev_entries | awk -v p="$node" '$2 == p {found = 1} END {exit !found}'; then
    continue
  fi
  index=0
  while dev_entries | awk -v k="dev$index" '$1 == k {found = 1} END {exit !found}'; do
    index=$((index + 1))
  done
  owe "ct-$vmid-restart"
  pct set "$vmid" "--dev$index" "$node"
  printf 'dev%s %s\n' "$index" "$node" >>"$owned"
  devices_changed=1
  note_change "passed $node to container $vmid as dev$index"
done
if [ "$devices_changed" = 1 ] || owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  with_lock "ct-$vmid" restart_if_running
fi

# --- verify ------------------------------------------------------------------------------------------------
for node in "${wanted[@]}"; do
  dev_entries | awk -v p="$node" '$2 == p {found = 1} END {exit !found}' || refuse "container $vmid lacks $node after pct set"
done
finish
