# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=training-monitor]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# The monitoring web UI on 127.0.0.1:8686.
unit_name=gpuhosts-training-monitor.service
restart=0
needs=(/opt/gpuhosts/monitor/venv/bin/python)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
systemd_repair "$unit_name"
[ "$systemd_repaired" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py.sha256 sha256:1b433ebeec8db11c]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py.sha256 sha256:52342f18efe49460]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py.sha256 sha256:be9386e7b3d1824f]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py.sha256 sha256:9aabde94f52f5e3b]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py.sha256 sha256:8e6f3227064cc665]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/metrics.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/metrics.py.sha256 sha256:e736894be52e2eca]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py.sha256 sha256:7709c6f85a83d211]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py.sha256 sha256:e9b2cb1b42f5f879]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html.sha256 sha256:5128b45c171e0ea6]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /etc/systemd/system/gpuhosts-training-monitor.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-training-monitor.service sha256:6ea0ef9d7c97facd]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
systemd_running "$unit_name" "$restart"
say "$unit_name is running"
finish
