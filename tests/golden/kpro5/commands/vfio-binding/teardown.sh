# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
# [templates/vfio_binding/pci.sh.j2 sha256:675ec86571878761]

bootloader=systemd-boot
original="$state_dir/vfio-original.state"
added_args="$state_dir/vfio-kernel-args.state"

# --- check: putting every function back on its original driver is safe -------------------------------------
if [ -f "$original" ]; then
  load_vm_table
  while read -r function driver _override; do
    current="$(pci_driver "$function")"
    [ "$current" != "$driver" ] || continue
    if [ "$current" = nvidia ]; then
      problem="$(gpu_release_problem "$function")"
      [ -z "$problem" ] || refuse "$problem"
    fi
    if [ "$current" = vfio-pci ]; then
      users="$(vms_using_slot "${function%.*}")"
      while read -r vmid status; do
        if [ -n "$vmid" ] && [ "$status" != stopped ]; then
          refuse "VM $vmid is $status with ${function%.*} passed through; stop it before tearing down"
        fi
      done <<<"$users"
    fi
  done <"$original"
fi

# --- act: files and boot configuration ---------------------------------------------------------------------
initramfs_stale=0
remove_file /etc/modprobe.d/gpuhosts-vfio.conf
[ "$file_changed" = 0 ] || initramfs_stale=1
remove_file /etc/modules-load.d/gpuhosts-vfio.conf
[ "$file_changed" = 0 ] || initramfs_stale=1
remove_file /usr/local/lib/gpuhosts/vfio-override.sh
[ "$file_changed" = 0 ] || initramfs_stale=1
remove_file /etc/initramfs-tools/hooks/gpuhosts-vfio
[ "$file_changed" = 0 ] || initramfs_stale=1
rmdir "$root"/usr/local/lib/gpuhosts 2>/dev/null || true
if [ -d "$state_dir/backup/etc/modprobe.d" ]; then
  for backup in "$state_dir"/backup/etc/modprobe.d/*; do
    [ -f "$backup" ] || continue
    cp -p "$backup" "$root/etc/modprobe.d/${backup##*/}"
    rm -f "$backup"
    note_change "restored /etc/modprobe.d/${backup##*/}"
    initramfs_stale=1
  done
  rm -rf "$state_dir/backup"
fi
if [ "$initramfs_stale" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi

if [ -f "$added_args" ]; then
  current="$(kernel_cmdline)"
  kept=""
  for arg in $current; do
    grep -qxF "$arg" "$added_args" || kept="${kept:+$kept }$arg"
  done
  if [ "$kept" != "$current" ]; then
    set_kernel_cmdline "$kept"
    reboot_required=1
  fi
  rm -f "$added_args"
fi

# --- act: live binding back to the start -------------------------------------------------------------------
if [ -f "$original" ]; then
  while read -r function driver override; do
    if [ "$(pci_driver "$function")" != "$driver" ]; then
      if [ -n "$driver" ]; then
        rebind "$function" "$driver"
      else
        sysfs_write "/sys/bus/pci/devices/$function/driver/unbind" "$function"
      fi
      note_change "returned $function to '${driver:-no driver}'"
    fi
    if [ "$(driver_override "$function")" != "$override" ]; then
      sysfs_write "/sys/bus/pci/devices/$function/driver_override" "$override"
    fi
  done <"$original"
  rm -f "$original"
fi
rmdir "$state_dir" 2>/dev/null || true
finish
