# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-server]
# Stop and remove gpuhosts-hidden-state-server.service; the hidden states it cached are the training's to delete.
unit_name=gpuhosts-hidden-state-server.service
if systemctl is-active --quiet "$unit_name"; then
  systemctl stop "$unit_name"
  note_change "stopped $unit_name"
fi
if systemctl is-enabled --quiet "$unit_name" 2>/dev/null; then
  systemctl disable --quiet "$unit_name"
  note_change "disabled $unit_name"
fi
remove_file /etc/systemd/system/gpuhosts-hidden-state-server.service
remove_file /usr/local/lib/gpuhosts/check-hidden-states.py
[ "$changed" = 0 ] || systemctl daemon-reload
finish
