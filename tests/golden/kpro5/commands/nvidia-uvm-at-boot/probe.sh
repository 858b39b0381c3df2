# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=nvidia-uvm-at-boot]
# The probe of nvidia-uvm-at-boot: reads the host and changes nothing; prints one facts line.
# gpu_node ADDRESS — "present" when the node of the GPU's minor exists; the minor is the driver's to choose.
gpu_node() {
  local minor
  minor="$(gpu_minor "$1")"
  if [ -z "$minor" ]; then
    echo "no minor (not on nvidia)"
  elif [ -e "$root/dev/nvidia$minor" ]; then
    echo present
  else
    echo "missing /dev/nvidia$minor"
  fi
}

fact 'file /etc/systemd/system/gpuhosts-nvidia-uvm.service' "$( { file_state /etc/systemd/system/gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-nvidia-uvm.service' "$( { { systemctl is-enabled gpuhosts-nvidia-uvm.service; systemctl is-active gpuhosts-nvidia-uvm.service; } | paste -sd ' ' -; } 2>/dev/null || true)"
fact 'node /dev/nvidiactl' "$( { [ -e "$root/dev/nvidiactl" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node /dev/nvidia-uvm' "$( { [ -e "$root/dev/nvidia-uvm" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node /dev/nvidia-uvm-tools' "$( { [ -e "$root/dev/nvidia-uvm-tools" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node of GPU 0000:41:00.0' "$( { gpu_node 0000:41:00.0; } 2>/dev/null || true)"
fact 'node of GPU 0000:61:00.0' "$( { gpu_node 0000:61:00.0; } 2>/dev/null || true)"
emit_facts
