# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=nvidia-uvm-at-boot]
uvm_unit_name=gpuhosts-nvidia-uvm.service

install_file /etc/systemd/system/gpuhosts-nvidia-uvm.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-nvidia-uvm.service sha256:9372a1d1c36cf100]
GPUHOSTS_EOF
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi
if ! systemctl is-enabled --quiet "$uvm_unit_name" || ! systemctl is-active --quiet "$uvm_unit_name"; then
  systemctl enable --now "$uvm_unit_name"
  note_change "enabled $uvm_unit_name"
fi
# The nodes go away with the module (a driver upgrade unloads it); the oneshot unit then stays "active".
if [ ! -e "$root/dev/nvidia-uvm" ] || [ ! -e "$root/dev/nvidia-uvm-tools" ]; then
  systemctl restart "$uvm_unit_name"
  note_change "recreated /dev/nvidia-uvm"
fi
for node in /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
  [ -e "$root$node" ] || refuse "$node is missing after starting $uvm_unit_name: is the nvidia module loaded (cat /proc/driver/nvidia/version)?"
done
say "nvidia-uvm major $(char_major nvidia-uvm) (dynamic; read from /proc/devices at every container start)"
finish
