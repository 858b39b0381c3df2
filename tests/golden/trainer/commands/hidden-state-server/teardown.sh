# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-server]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Stop and remove gpuhosts-hidden-state-server.service; the hidden states it cached are the training's to delete.
unit_name=gpuhosts-hidden-state-server.service
systemd_stopped "$unit_name"
remove_file /etc/systemd/system/gpuhosts-hidden-state-server.service
remove_file /usr/local/lib/gpuhosts/check-hidden-states.py
[ "$changed" = 0 ] || systemctl daemon-reload
finish
