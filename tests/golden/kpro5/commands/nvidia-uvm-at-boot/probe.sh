# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-uvm-at-boot]
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

# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-nvidia-uvm.service]="$(systemd_show gpuhosts-nvidia-uvm.service)"
fact 'file /etc/systemd/system/gpuhosts-nvidia-uvm.service' "$( { file_state /etc/systemd/system/gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-nvidia-uvm.service' "$( { systemd_state gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-nvidia-uvm.service' "$( { systemd_exec gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-nvidia-uvm.service' "$( { systemd_property_of Environment gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-nvidia-uvm.service' "$( { systemd_property_of User gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-nvidia-uvm.service' "$( { systemd_dropins gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'node /dev/nvidiactl' "$( { [ -e "$root/dev/nvidiactl" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node /dev/nvidia-uvm' "$( { [ -e "$root/dev/nvidia-uvm" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node /dev/nvidia-uvm-tools' "$( { [ -e "$root/dev/nvidia-uvm-tools" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node of GPU 0000:41:00.0' "$( { gpu_node 0000:41:00.0; } 2>/dev/null || true)"
fact 'node of GPU 0000:61:00.0' "$( { gpu_node 0000:61:00.0; } 2>/dev/null || true)"
emit_facts
