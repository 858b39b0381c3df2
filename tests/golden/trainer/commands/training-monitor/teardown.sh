# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=training-monitor]
# Stop and remove gpuhosts-training-monitor.service; it only reads the training.
unit_name=gpuhosts-training-monitor.service
if systemctl is-active --quiet "$unit_name"; then
  systemctl stop "$unit_name"
  note_change "stopped $unit_name"
fi
if systemctl is-enabled --quiet "$unit_name" 2>/dev/null; then
  systemctl disable --quiet "$unit_name"
  note_change "disabled $unit_name"
fi
remove_file /etc/systemd/system/gpuhosts-training-monitor.service
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/metrics.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py
remove_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html
rmdir "$root"/etc/gpuhosts 2>/dev/null || true
[ "$changed" = 0 ] || systemctl daemon-reload
finish
