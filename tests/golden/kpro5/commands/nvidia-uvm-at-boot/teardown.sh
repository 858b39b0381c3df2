# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=nvidia-uvm-at-boot]

if systemctl is-enabled --quiet gpuhosts-nvidia-uvm.service || systemctl is-active --quiet gpuhosts-nvidia-uvm.service; then
  systemctl disable --now gpuhosts-nvidia-uvm.service
  note_change "disabled gpuhosts-nvidia-uvm.service"
fi
remove_file /etc/systemd/system/gpuhosts-nvidia-uvm.service
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi
finish
