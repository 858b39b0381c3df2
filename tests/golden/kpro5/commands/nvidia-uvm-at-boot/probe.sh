# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=nvidia-uvm-at-boot]
# The probe of nvidia-uvm-at-boot: reads the host and changes nothing; prints one facts line.
fact 'file /etc/systemd/system/gpuhosts-nvidia-uvm.service' "$( { file_state /etc/systemd/system/gpuhosts-nvidia-uvm.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-nvidia-uvm.service' "$( { { systemctl is-enabled gpuhosts-nvidia-uvm.service; systemctl is-active gpuhosts-nvidia-uvm.service; } | paste -sd ' ' -; } 2>/dev/null || true)"
fact 'node /dev/nvidia-uvm' "$( { [ -e "$root/dev/nvidia-uvm" ] && echo present || echo missing; } 2>/dev/null || true)"
fact 'node /dev/nvidia-uvm-tools' "$( { [ -e "$root/dev/nvidia-uvm-tools" ] && echo present || echo missing; } 2>/dev/null || true)"
emit_facts
