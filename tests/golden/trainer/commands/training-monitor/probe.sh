# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=training-monitor]
# The probe of training-monitor: reads the host and changes nothing; prints one facts line.
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-training-monitor.service' "$( { file_state /etc/systemd/system/gpuhosts-training-monitor.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-training-monitor.service' "$( { { systemctl is-enabled gpuhosts-training-monitor.service; systemctl is-active gpuhosts-training-monitor.service; } | paste -sd ' ' -; } 2>/dev/null || true)"
emit_facts
