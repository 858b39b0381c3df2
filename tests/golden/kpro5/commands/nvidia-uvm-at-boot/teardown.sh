# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-uvm-at-boot]
uvm_unit_name=gpuhosts-nvidia-uvm.service

if systemctl is-enabled --quiet "$uvm_unit_name" || systemctl is-active --quiet "$uvm_unit_name"; then
  systemctl disable --now "$uvm_unit_name"
  note_change "disabled $uvm_unit_name"
fi
remove_file /etc/systemd/system/gpuhosts-nvidia-uvm.service
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi
finish
