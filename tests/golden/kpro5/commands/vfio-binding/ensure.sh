# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=vfio-binding]
# [templates/vfio_binding/pci.sh.j2 sha256:d46186d4cfab4eb2]

bootloader=systemd-boot
vfio_slots=(0000:01:00 0000:21:00)
nvidia_slots=(0000:41:00 0000:61:00)
kernel_args=(iommu=pt)
original="$state_dir/vfio-original.state"
added_args="$state_dir/vfio-kernel-args.state"

# --- check: every declared GPU is on this host, and is NVIDIA ----------------------------------------------
for slot in "${vfio_slots[@]}" "${nvidia_slots[@]}"; do
  [ -d "$root/sys/bus/pci/devices/$slot.0" ] || refuse "GPU $slot.0 is declared but not on this host (lspci -D); fix gpuhosts:gpus"
  vendor="$(cat "$root/sys/bus/pci/devices/$slot.0/vendor")"
  [ "$vendor" = 0x10de ] || refuse "$slot.0 is not an NVIDIA device (vendor $vendor); fix gpuhosts:gpus"
done

# --- check: which functions must move, and is it safe ------------------------------------------------------
to_vfio=()
to_mark=()
to_release=()
for slot in "${vfio_slots[@]}"; do
  while read -r function; do
    if [ "$(pci_driver "$function")" != vfio-pci ]; then
      to_vfio+=("$function")
    elif [ "$(driver_override "$function")" != vfio-pci ]; then
      # Already on vfio-pci (perhaps in a running VM): only the override is recorded, nothing is unbound.
      to_mark+=("$function")
    fi
  done < <(slot_functions "$slot")
done
for slot in "${nvidia_slots[@]}"; do
  while read -r function; do
    if [ "$(pci_driver "$function")" = vfio-pci ] || [ -n "$(driver_override "$function")" ]; then
      to_release+=("$function")
    fi
  done < <(slot_functions "$slot")
done

for function in "${to_vfio[@]}"; do
  if [ "$(pci_driver "$function")" = nvidia ]; then
    problem="$(gpu_release_problem "$function")"
    [ -z "$problem" ] || refuse "$problem"
  fi
done
for function in "${to_release[@]}"; do
  while read -r vmid status; do
    if [ "$status" = running ]; then
      refuse "VM $vmid is running with ${function%.*} passed through (qm config $vmid); stop it or keep the GPU on vfio"
    fi
    say "warning: stopped VM $vmid still lists ${function%.*} in hostpci; it will not start until that entry is removed"
  done < <(vms_using_slot "${function%.*}")
done

# --- act: boot-time binding by address ---------------------------------------------------------------------
mkdir -p "$state_dir"
if [ ! -f "$original" ]; then
  for slot in "${vfio_slots[@]}" "${nvidia_slots[@]}"; do
    while read -r function; do
      printf '%s %s %s\n' "$function" "$(pci_driver "$function")" "$(driver_override "$function")"
    done < <(slot_functions "$slot")
  done >"$original"
fi

initramfs_stale=0
if owed initramfs; then
  initramfs_stale=1
fi
owe initramfs
install_file /usr/local/lib/gpuhosts/vfio-override.sh 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/vfio-override.sh sha256:7a0da9947fb888e4]
GPUHOSTS_EOF
install_file /etc/modprobe.d/gpuhosts-vfio.conf 0644 <<'GPUHOSTS_EOF'
# [content: etc/modprobe.d/gpuhosts-vfio.conf sha256:4996b6928c9ae98c]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || initramfs_stale=1
install_file /etc/modules-load.d/gpuhosts-vfio.conf 0644 <<'GPUHOSTS_EOF'
# [content: etc/modules-load.d/gpuhosts-vfio.conf sha256:a867bda466690686]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || initramfs_stale=1

# A hand-made `options vfio-pci ids=…` grabs every GPU of that model; it is commented out (kept in a backup)
# when it would take a GPU that must stay with nvidia.
release_ids=()
for slot in "${nvidia_slots[@]}"; do
  while read -r function; do
    dev="$root/sys/bus/pci/devices/$function"
    release_ids+=("$(sed 's/^0x//' "$dev/vendor"):$(sed 's/^0x//' "$dev/device")")
  done < <(slot_functions "$slot")
done
for conf in "$root"/etc/modprobe.d/*.conf; do
  [ -f "$conf" ] || continue
  name="${conf##*/}"
  [ "$name" != gpuhosts-vfio.conf ] || continue
  ids="$(sed -nE 's/^[[:space:]]*options[[:space:]]+vfio[-_]pci[[:space:]].*ids=([0-9a-fA-F:,]+).*/\1/p' "$conf" | tr ',' ' ')"
  [ -n "$ids" ] || continue
  clash=0
  for id in $ids; do
    for wanted in "${release_ids[@]}"; do
      [ "${id,,}" != "$wanted" ] || clash=1
    done
  done
  [ "$clash" = 1 ] || continue
  mkdir -p "$state_dir/backup/etc/modprobe.d"
  [ -f "$state_dir/backup/etc/modprobe.d/$name" ] || cp -p "$conf" "$state_dir/backup/etc/modprobe.d/$name"
  install_file "/etc/modprobe.d/$name" "$(stat -c %a "$conf")" < <(
    sed -E 's/^([[:space:]]*options[[:space:]]+vfio[-_]pci[[:space:]].*ids=.*)$/# gpuhosts: vfio-pci binds by PCI address now; was: \1/' "$conf")
  initramfs_stale=1
done

if [ "$initramfs_stale" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi
settled initramfs

# --- act: IOMMU kernel arguments ---------------------------------------------------------------------------
current="$(kernel_cmdline)"
wanted="$current"
for arg in "${kernel_args[@]}"; do
  case " $current " in
    *" $arg "*) ;;
    *)
      wanted="${wanted:+$wanted }$arg"
      grep -qxF "$arg" "$added_args" 2>/dev/null || printf '%s\n' "$arg" >>"$added_args"
      ;;
  esac
done
if [ "$wanted" != "$current" ]; then
  set_kernel_cmdline "$wanted"
fi
for arg in "${kernel_args[@]}"; do
  case " $(cat "$root/proc/cmdline") " in
    *" $arg "*) ;;
    *) reboot_required=1 ;;
  esac
done

# --- act: live rebinding -----------------------------------------------------------------------------------
if [ "${#to_vfio[@]}" -gt 0 ] && [ ! -d "$root/sys/module/vfio_pci" ]; then
  modprobe vfio-pci
fi
for function in "${to_mark[@]}"; do
  sysfs_write "/sys/bus/pci/devices/$function/driver_override" vfio-pci
  note_change "marked $function for vfio-pci"
done
for function in "${to_vfio[@]}"; do
  rebind "$function" vfio-pci
  note_change "bound $function to vfio-pci"
done
# A loaded `ids=` option lives on as vfio-pci's dynamic ids; they would take the GPU straight back.
for function in "${to_release[@]}"; do
  dev="$root/sys/bus/pci/devices/$function"
  id="$(sed 's/^0x//' "$dev/vendor") $(sed 's/^0x//' "$dev/device")"
  sysfs_write /sys/bus/pci/drivers/vfio-pci/remove_id "$id" 2>/dev/null || true
done
for function in "${to_release[@]}"; do
  rebind "$function" ""
  note_change "released $function from vfio-pci (now: $(pci_driver "$function"))"
done

# --- verify ------------------------------------------------------------------------------------------------
for slot in "${vfio_slots[@]}"; do
  while read -r function; do
    [ "$(pci_driver "$function")" = vfio-pci ] || refuse "$function is on '$(pci_driver "$function")', not vfio-pci, after binding"
  done < <(slot_functions "$slot")
done
for slot in "${nvidia_slots[@]}"; do
  driver="$(pci_driver "$slot.0")"
  if [ "$driver" = vfio-pci ]; then
    refuse "$slot.0 is still on vfio-pci after releasing it"
  elif [ -z "$driver" ] && [ -d "$root/sys/module/nvidia" ]; then
    say "$slot.0 has no driver although nvidia is loaded; it binds at the next boot"
    reboot_required=1
  fi
done
finish
