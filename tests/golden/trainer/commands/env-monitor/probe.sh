# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=env-monitor]
# The probe of env-monitor: reads the host and changes nothing; prints one facts line.
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
distributions_wanted[/opt/gpuhosts/monitor/venv]='blinker==1.9.0
click==8.5.1
flask==3.1.3
itsdangerous==2.2.0
jinja2==3.1.6
markupsafe==3.0.4
werkzeug==3.1.9'
fact 'file /opt/gpuhosts/monitor/requirements.lock' "$( { file_state /opt/gpuhosts/monitor/requirements.lock; } 2>/dev/null || true)"
fact 'distributions in /opt/gpuhosts/monitor/venv' "$( { distributions_state /opt/gpuhosts/monitor/venv ''; } 2>/dev/null || true)"
fact 'flask in /opt/gpuhosts/monitor/venv' "$( { package_state /opt/gpuhosts/monitor/venv flask; } 2>/dev/null || true)"
emit_facts
