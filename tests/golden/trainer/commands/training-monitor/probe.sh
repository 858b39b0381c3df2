# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=training-monitor]
# The probe of training-monitor: reads the host and changes nothing; prints one facts line.
# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-training-monitor.service]="$(systemd_show gpuhosts-training-monitor.service)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/bind.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/metrics.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/metrics.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py; } 2>/dev/null || true)"
fact 'file /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html' "$( { file_state /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-training-monitor.service' "$( { file_state /etc/systemd/system/gpuhosts-training-monitor.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-training-monitor.service' "$( { systemd_state gpuhosts-training-monitor.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-training-monitor.service' "$( { systemd_exec gpuhosts-training-monitor.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-training-monitor.service' "$( { systemd_property_of Environment gpuhosts-training-monitor.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-training-monitor.service' "$( { systemd_property_of User gpuhosts-training-monitor.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-training-monitor.service' "$( { systemd_dropins gpuhosts-training-monitor.service; } 2>/dev/null || true)"
emit_facts
