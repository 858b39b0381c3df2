# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=hidden-state-server]
# The probe of hidden-state-server: reads the host and changes nothing; prints one facts line.
fact 'file /etc/systemd/system/gpuhosts-hidden-state-server.service' "$( { file_state /etc/systemd/system/gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
fact 'file /usr/local/lib/gpuhosts/check-hidden-states.py' "$( { file_state /usr/local/lib/gpuhosts/check-hidden-states.py; } 2>/dev/null || true)"
fact 'systemd gpuhosts-hidden-state-server.service' "$( { { systemctl is-enabled gpuhosts-hidden-state-server.service; systemctl is-active gpuhosts-hidden-state-server.service; } | paste -sd ' ' -; } 2>/dev/null || true)"
emit_facts
