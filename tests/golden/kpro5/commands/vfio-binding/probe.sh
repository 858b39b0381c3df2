# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
# The probe of vfio-binding: reads the host and changes nothing; prints one facts line.
# [templates/vfio_binding/decide.sh.j2 sha256:f0eb1df6a1186b60 bootloader=systemd-boot vfio_slots=(0000:01:00 0000:21:00) nvidia_slots=(0000:41:00 0000:61:00) plan_json='{"bootloader": "systemd-boot", "kernel_args": ["iommu=pt"], "nvidia_slots": ["0000:41:00", "0000:61:00"], "vfio_slots": ["0000:01:00", "0000:21:00"]}' decider=# [gpuhosts/hostside/vfio_binding.py sha256:5b2559c21320ca13 verbatim; tests/test_vfio_binding_cases.py]]

# Every fact of the probe comes from one decision over one gathering: the VMs' PCI ids cost an API read per VM.
decision_error=""
observations="$(decide probe 2>&1)" || { decision_error="${observations//$'\n'/ }"; observations=""; }

# observed NAME — what the decision observed for that fact, or why nothing could be.
observed() {
  if [ -n "$decision_error" ]; then
    printf 'unknown: %s\n' "$decision_error"
    return 0
  fi
  awk -F'\t' -v name="$1" '$1 == "fact" && $2 == name { sub(/^[^\t]*\t[^\t]*\t/, ""); print }' <<<"$observations"
}

fact 'file /usr/local/lib/gpuhosts/vfio-override.sh' "$( { file_state /usr/local/lib/gpuhosts/vfio-override.sh; } 2>/dev/null || true)"
fact 'file /etc/initramfs-tools/hooks/gpuhosts-vfio' "$( { file_state /etc/initramfs-tools/hooks/gpuhosts-vfio; } 2>/dev/null || true)"
fact 'file /etc/modprobe.d/gpuhosts-vfio.conf' "$( { file_state /etc/modprobe.d/gpuhosts-vfio.conf; } 2>/dev/null || true)"
fact 'file /etc/modules-load.d/gpuhosts-vfio.conf' "$( { file_state /etc/modules-load.d/gpuhosts-vfio.conf; } 2>/dev/null || true)"
fact 'kernel argument iommu=pt' "$( { observed 'kernel argument iommu=pt'; } 2>/dev/null || true)"
fact 'slot 0000:01:00' "$( { observed 'slot 0000:01:00'; } 2>/dev/null || true)"
fact 'slot 0000:21:00' "$( { observed 'slot 0000:21:00'; } 2>/dev/null || true)"
fact 'slot 0000:41:00' "$( { observed 'slot 0000:41:00'; } 2>/dev/null || true)"
fact 'running VM with 0000:41:00' "$( { observed 'running VM with 0000:41:00'; } 2>/dev/null || true)"
fact 'slot 0000:61:00' "$( { observed 'slot 0000:61:00'; } 2>/dev/null || true)"
fact 'running VM with 0000:61:00' "$( { observed 'running VM with 0000:61:00'; } 2>/dev/null || true)"
emit_facts
