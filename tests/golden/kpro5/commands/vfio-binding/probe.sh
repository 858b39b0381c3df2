# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=vfio-binding]
# The probe of vfio-binding: reads the host and changes nothing; prints one facts line.
# [templates/vfio_binding/pci.sh.j2 sha256:d46186d4cfab4eb2]
bootloader=systemd-boot

# kernel_arg_state ARG — "present" when the boot loader's configured command line carries ARG.
kernel_arg_state() {
  case " $(kernel_cmdline 2>/dev/null | head -n1) " in
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

# "SLOT VMID" for every hostpciN of every running VM, read once per probe: each qm call costs a Perl start on a
# real host, and only running VMs matter here.
running_vm_slots="$(
  while read -r vmid status; do
    [ "$status" = running ] || continue
    while read -r entry; do
      if [ "${entry#mapping=}" != "$entry" ]; then
        entry="$(mapped_paths "${entry#mapping=}")"
      fi
      for id in ${entry//;/ }; do
        id="$(normal_address "$id")"
        printf '%s %s\n' "${id%.*}" "$vmid"
        printf '%s %s\n' "$id" "$vmid"
      done
    done < <(qm config "$vmid" | sed -nE 's/^hostpci[0-9]+: ([^,]+).*/\1/p')
  done < <(qm list 2>/dev/null | awk 'NR > 1 {print $1, $3}') 2>/dev/null
)" || true

# running_vms_with SLOT — the running VMs whose hostpciN names the slot, or "none".
running_vms_with() {
  local found
  found="$(awk -v slot="$1" '$1 == slot && !seen[$2]++ {printf "%sVM %s", sep, $2; sep = ", "}' <<<"$running_vm_slots")"
  echo "${found:-none}"
}

fact 'file /usr/local/lib/gpuhosts/vfio-override.sh' "$( { file_state /usr/local/lib/gpuhosts/vfio-override.sh; } 2>/dev/null || true)"
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
