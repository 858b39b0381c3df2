# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-server]
# The probe of hidden-state-server: reads the host and changes nothing; prints one facts line.
# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-hidden-state-server.service]="$(systemd_show gpuhosts-hidden-state-server.service)"
fact 'file /etc/systemd/system/gpuhosts-hidden-state-server.service' "$( { file_state /etc/systemd/system/gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
fact 'file /usr/local/lib/gpuhosts/check-hidden-states.py' "$( { file_state /usr/local/lib/gpuhosts/check-hidden-states.py; } 2>/dev/null || true)"
fact 'systemd gpuhosts-hidden-state-server.service' "$( { systemd_state gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-hidden-state-server.service' "$( { systemd_exec gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-hidden-state-server.service' "$( { systemd_property_of Environment gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-hidden-state-server.service' "$( { systemd_property_of User gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-hidden-state-server.service' "$( { systemd_dropins gpuhosts-hidden-state-server.service; } 2>/dev/null || true)"
emit_facts
