# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=ct129-gpu-devices]
# The probe of ct129-gpu-devices: reads the host and changes nothing; prints one facts line.
# [templates/lxc_gpu_passthrough/container.sh.j2 sha256:d10200d97fad05ca vmid=129 allow_restart=true]
container_config="$(pct config "$vmid" 2>/dev/null || true)"

# container_device NODE — "passed" when a devN entry of the container names NODE.
container_device() {
  if parse_dev_entries <<<"$container_config" | awk -F '\t' -v p="$1" '$2 == p {found = 1} END {exit !found}'; then
    echo passed
  else
    echo absent
  fi
}

# container_device_of_gpu ADDRESS — the same for the GPU's node, /dev/nvidia<minor from the host's driver>.
container_device_of_gpu() {
  local minor
  minor="$(gpu_minor "$1")"
  if [ -z "$minor" ]; then
    echo "no minor (GPU not on nvidia)"
  else
    container_device "/dev/nvidia$minor"
  fi
}

fact 'device 0000:41:00.0' "$( { container_device_of_gpu 0000:41:00.0; } 2>/dev/null || true)"
fact 'device 0000:61:00.0' "$( { container_device_of_gpu 0000:61:00.0; } 2>/dev/null || true)"
fact 'device /dev/nvidiactl' "$( { container_device /dev/nvidiactl; } 2>/dev/null || true)"
fact 'device /dev/nvidia-uvm' "$( { container_device /dev/nvidia-uvm; } 2>/dev/null || true)"
fact 'device /dev/nvidia-uvm-tools' "$( { container_device /dev/nvidia-uvm-tools; } 2>/dev/null || true)"
fact 'observed: minor of 0000:41:00.0' "$( { gpu_minor 0000:41:00.0; } 2>/dev/null || true)"
fact 'observed: minor of 0000:61:00.0' "$( { gpu_minor 0000:61:00.0; } 2>/dev/null || true)"
fact 'observed: major of nvidia-uvm' "$( { char_major nvidia-uvm; } 2>/dev/null || true)"
fact 'observed: major of nvidia-caps' "$( { char_major nvidia-caps; } 2>/dev/null || true)"
emit_facts
