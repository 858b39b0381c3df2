# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=training-monitor]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Stop and remove gpuhosts-training-monitor.service; it only reads the training.
unit_name=gpuhosts-training-monitor.service
systemd_stopped "$unit_name"
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
