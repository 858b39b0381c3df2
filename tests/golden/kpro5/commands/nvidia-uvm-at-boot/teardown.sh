# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-uvm-at-boot]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
uvm_unit_name=gpuhosts-nvidia-uvm.service

systemd_stopped "$uvm_unit_name"
remove_file /etc/systemd/system/gpuhosts-nvidia-uvm.service
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi
finish
