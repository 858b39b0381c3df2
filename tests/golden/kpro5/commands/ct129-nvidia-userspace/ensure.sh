# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-nvidia-userspace]
# [templates/common/container.sh.j2 sha256:138093b4bc2d324f vmid=129 allow_restart=true]

version=580.126.09
run_file=NVIDIA-Linux-x86_64-580.126.09.run
cache="$root/var/cache/gpuhosts"
state="$state_dir/ct-$vmid-userspace.state"
gpu_count=2
# In-container commands go through `bash -c` so that paths inside the container are spelled once.
in_container() { pct exec "$vmid" -- bash -c "$1" gpuhosts "${@:2}"; }
container_userspace() {
  # shellcheck disable=SC2016  # expands inside the container
  in_container 'for lib in "${GPUHOSTS_HOST_ROOT:-}"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*; do
    [ -e "$lib" ] && { printf "%s\n" "${lib##*/libnvidia-ml.so.}"; break; }; done; true'
}

# --- check: user space can only ever match the host's kernel module ---------------------------------------
module="$(module_version)"
[ "$module" = "$version" ] || refuse "the host's nvidia module is ${module:-not loaded}, not $version: a $version user space in \
container $vmid would fail with 'Driver/library version mismatch'; finish the host driver (reboot if it asks) and run again"
container_running || refuse "container $vmid is not running; start it (pct start $vmid) and run again"
[ -f "$cache/$run_file" ] || refuse "$cache/$run_file is missing; the host driver unit keeps it there"

# --- act ---------------------------------------------------------------------------------------------------
current="$(container_userspace)"
say "container $vmid user space: ${current:-none}; host module: $module"
if [ "$current" != "$version" ]; then
  mkdir -p "$state_dir"
  grep -q '^previous_userspace=' "$state" 2>/dev/null || printf 'previous_userspace=%s\n' "$current" >>"$state"
  pct push "$vmid" "$cache/$run_file" "/root/$run_file"
  # shellcheck disable=SC2016  # expands inside the container
  in_container 'sh "${GPUHOSTS_HOST_ROOT:-}/root/$1" --silent --no-kernel-modules; rm -f "${GPUHOSTS_HOST_ROOT:-}/root/$1"' "$run_file"
  note_change "installed NVIDIA user space $version in container $vmid"
fi

# --- verify: NVML inside the container talks to the host module -------------------------------------------
current="$(container_userspace)"
[ "$current" = "$version" ] || refuse "container $vmid still has user space ${current:-none} after installing $version"
if ! smi="$(pct exec "$vmid" -- nvidia-smi --query-gpu=pci.bus_id,driver_version --format=csv,noheader 2>&1)"; then
  refuse "nvidia-smi in container $vmid failed: $smi"
fi
seen=0
while read -r bus driver; do
  [ "$driver" = "$version" ] || refuse "container $vmid reports driver $driver for $bus, not $version"
  seen=$((seen + 1))
done < <(printf '%s\n' "$smi" | smi_rows)
if [ "$seen" != "$gpu_count" ]; then
  say "warning: container $vmid sees $seen GPU(s), the stack gives it $gpu_count; restart it (pct reboot $vmid)"
fi
say "container $vmid sees $seen GPU(s) with driver $version"
finish
