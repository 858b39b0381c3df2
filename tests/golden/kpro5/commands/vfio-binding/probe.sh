# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
# The probe of vfio-binding: reads the host and changes nothing; prints one facts line.
# [templates/vfio_binding/pci.sh.j2 sha256:675ec86571878761]
bootloader=systemd-boot

# kernel_arg_state ARG — "present" when the boot loader's configured command line carries ARG; why it cannot be read
# otherwise.
kernel_arg_state() {
  local line
  if ! line="$(kernel_cmdline 2>&1)"; then
    printf 'unreadable: %s\n' "${line#*refused: }"
    return 0
  fi
  case " $line " in
    *" $1 "*) echo present ;;
    *) echo absent ;;
  esac
}

# slot_binding SLOT — "vfio-pci" when every function of the slot is on vfio-pci, "not vfio-pci" when none is,
# otherwise each function with its driver.
slot_binding() {
  local function drivers=() on_vfio=0 total=0
  while read -r function; do
    total=$((total + 1))
    drivers+=("$function=$(pci_driver "$function")")
    [ "$(pci_driver "$function")" != vfio-pci ] || on_vfio=$((on_vfio + 1))
  done < <(slot_functions "$1")
  if [ "$total" -gt 0 ] && [ "$on_vfio" = "$total" ]; then
    echo vfio-pci
  elif [ "$on_vfio" = 0 ]; then
    echo "not vfio-pci"
  else
    echo "${drivers[*]}"
  fi
}

# The VMs' PCI ids, read once per probe: each qm call costs a Perl start on a real host. A qm failure is the fact's
# value, never "none".
vm_table_error=""
vm_table="$(vm_table)" || { vm_table_error="${vm_table//$'\n'/ }"; vm_table=""; }

# running_vms_with SLOT — the VMs not stopped whose hostpciN names the slot, "none", or why qm could not tell.
running_vms_with() {
  local vmid status found=""
  if [ -n "$vm_table_error" ]; then
    printf 'unknown: %s\n' "$vm_table_error"
    return 0
  fi
  while read -r vmid status; do
    if [ -n "$vmid" ] && [ "$status" != stopped ]; then
      found+="${found:+, }VM $vmid"
    fi
  done <<<"$(vms_using_slot "$1")"
  echo "${found:-none}"
}

fact 'file /usr/local/lib/gpuhosts/vfio-override.sh' "$( { file_state /usr/local/lib/gpuhosts/vfio-override.sh; } 2>/dev/null || true)"
fact 'file /etc/initramfs-tools/hooks/gpuhosts-vfio' "$( { file_state /etc/initramfs-tools/hooks/gpuhosts-vfio; } 2>/dev/null || true)"
fact 'file /etc/modprobe.d/gpuhosts-vfio.conf' "$( { file_state /etc/modprobe.d/gpuhosts-vfio.conf; } 2>/dev/null || true)"
fact 'file /etc/modules-load.d/gpuhosts-vfio.conf' "$( { file_state /etc/modules-load.d/gpuhosts-vfio.conf; } 2>/dev/null || true)"
fact 'kernel argument iommu=pt' "$( { kernel_arg_state iommu=pt; } 2>/dev/null || true)"
fact 'slot 0000:01:00' "$( { slot_binding 0000:01:00; } 2>/dev/null || true)"
fact 'slot 0000:21:00' "$( { slot_binding 0000:21:00; } 2>/dev/null || true)"
fact 'slot 0000:41:00' "$( { slot_binding 0000:41:00; } 2>/dev/null || true)"
fact 'running VM with 0000:41:00' "$( { running_vms_with 0000:41:00; } 2>/dev/null || true)"
fact 'slot 0000:61:00' "$( { slot_binding 0000:61:00; } 2>/dev/null || true)"
fact 'running VM with 0000:61:00' "$( { running_vms_with 0000:61:00; } 2>/dev/null || true)"
emit_facts
