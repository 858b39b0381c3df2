# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
# [templates/vfio_binding/decide.sh.j2 sha256:f0eb1df6a1186b60 bootloader=systemd-boot vfio_slots=(0000:01:00 0000:21:00) nvidia_slots=(0000:41:00 0000:61:00) plan_json='{"bootloader": "systemd-boot", "kernel_args": ["iommu=pt"], "nvidia_slots": ["0000:41:00", "0000:61:00"], "vfio_slots": ["0000:01:00", "0000:21:00"]}' decider=# [gpuhosts/hostside/vfio_binding.py sha256:5b2559c21320ca13 verbatim; tests/test_vfio_binding_cases.py]]
# [templates/vfio_binding/pci.sh.j2 sha256:327a157f4f6b2c72]

# --- check: putting every function back on its original driver is safe -------------------------------------
decisions="$(decide teardown)" || refuse "the vfio binding could not decide: its facts are above"
run_checks

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

while IFS=$'\t' read -r path content; do
  write_cmdline "$path" "$content"
done < <(decided write-cmdline)
if decided_to reboot; then
  reboot_required=1
fi
rm -f "$added_args"

# --- act: live binding back to the start -------------------------------------------------------------------
while IFS=$'\t' read -r verb function value; do
  case "$verb" in
    return)
      if [ -n "$value" ]; then
        rebind "$function" "$value"
      else
        sysfs_write "/sys/bus/pci/devices/$function/driver/unbind" "$function"
      fi
      note_change "returned $function to '${value:-no driver}'"
      ;;
    override) sysfs_write "/sys/bus/pci/devices/$function/driver_override" "$value" ;;
  esac
done <<<"$decisions"
rm -f "$original"
rmdir "$state_dir" 2>/dev/null || true
finish
