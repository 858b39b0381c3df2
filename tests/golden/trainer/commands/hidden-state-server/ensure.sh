# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-server]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# The hidden-state server on GPUs [0, 1, 2, 3].
unit_name=gpuhosts-hidden-state-server.service
restart=0
needs=(/opt/gpuhosts/speculators/src/scripts/launch_vllm.py /data/models/Qwen/Qwen3.6-27B/.gpuhosts-download)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
systemd_repair "$unit_name"
[ "$systemd_repaired" = 0 ] || restart=1
install_file /etc/systemd/system/gpuhosts-hidden-state-server.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-hidden-state-server.service sha256:cb60ced6f9eee56c]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /usr/local/lib/gpuhosts/check-hidden-states.py 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/check-hidden-states.py.sha256 sha256:a8de22387231097c]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
[ "$restart" = 0 ] || systemctl daemon-reload
if ! systemctl is-enabled --quiet "$unit_name"; then
  systemctl enable --quiet "$unit_name"
  note_change "enabled $unit_name"
fi
if ! systemctl is-active --quiet "$unit_name"; then
  systemctl start "$unit_name"
  note_change "started $unit_name"
elif [ "$restart" = 1 ]; then
  systemctl restart "$unit_name"
  note_change "restarted $unit_name with its new settings"
fi
systemctl is-active --quiet "$unit_name" || refuse "$unit_name did not start; see journalctl -u $unit_name"
say "$unit_name is running"
finish
