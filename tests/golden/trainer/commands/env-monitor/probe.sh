# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=env-monitor]
# The probe of env-monitor: reads the host and changes nothing; prints one facts line.
fact 'file /opt/gpuhosts/monitor/requirements.lock' "$( { file_state /opt/gpuhosts/monitor/requirements.lock; } 2>/dev/null || true)"
fact 'environment /opt/gpuhosts/monitor/venv' "$( { [ -x "$root"/opt/gpuhosts/monitor/venv/bin/python ] && cat "$root"/opt/gpuhosts/monitor/venv/.gpuhosts-requirement || echo missing; } 2>/dev/null || true)"
emit_facts
