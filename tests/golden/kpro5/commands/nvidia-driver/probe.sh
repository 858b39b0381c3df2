# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-driver]
# The probe of nvidia-driver: reads the host and changes nothing; prints one facts line.
# persistence_mode ADDRESS — the GPU's persistence mode as nvidia-smi reports it ("Enabled", "Disabled"), or
# "unknown: <why>" (nvidia-smi prints its errors on stdout, e.g. with no module loaded or another one).
persistence_mode() {
  local out
  if out="$(nvidia-smi -i "$1" --query-gpu=persistence_mode --format=csv,noheader 2>&1)"; then
    printf '%s\n' "$out"
  else
    printf 'unknown: %s\n' "${out//$'\n'/ }"
  fi
}

# pve_release — major.minor of pve-manager as pveversion prints it ("pve-manager/9.1.19/<commit> (running kernel:
# …)"), or "unknown" where pveversion does not answer.
pve_release() {
  local version
  version="$(pveversion 2>/dev/null | awk -F/ '$1 == "pve-manager" {print $2; exit}' || true)"
  if [ -n "$version" ]; then printf '%s\n' "${version%.*}"; else echo unknown; fi
}

# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-nvidia-persistenced.service]="$(systemd_show gpuhosts-nvidia-persistenced.service)"
fact 'file /etc/modprobe.d/gpuhosts-nouveau.conf' "$( { file_state /etc/modprobe.d/gpuhosts-nouveau.conf; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-nvidia-persistenced.service' "$( { file_state /etc/systemd/system/gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'installed user space' "$( { userspace_version; } 2>/dev/null || true)"
fact 'loaded module' "$( { module_version; } 2>/dev/null || true)"
fact 'loaded module type' "$( { module_type; } 2>/dev/null || true)"
fact 'systemd gpuhosts-nvidia-persistenced.service' "$( { systemd_state gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-nvidia-persistenced.service' "$( { systemd_exec gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-nvidia-persistenced.service' "$( { systemd_property_of Environment gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-nvidia-persistenced.service' "$( { systemd_property_of User gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-nvidia-persistenced.service' "$( { systemd_dropins gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'persistence mode 0000:41:00.0' "$( { persistence_mode 0000:41:00.0; } 2>/dev/null || true)"
fact 'persistence mode 0000:61:00.0' "$( { persistence_mode 0000:61:00.0; } 2>/dev/null || true)"
fact 'Proxmox VE release' "$( { pve_release; } 2>/dev/null || true)"
emit_facts
