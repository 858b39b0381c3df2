# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=node-exporter]
# The probe of node-exporter: reads the host and changes nothing; prints one facts line.
# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-node-exporter.service]="$(systemd_show gpuhosts-node-exporter.service)"
fact 'package prometheus-node-exporter' "$( { dpkg-query -W -f='${Status}' prometheus-node-exporter 2>/dev/null | grep -q 'install ok installed' && echo installed || echo missing; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-node-exporter.service' "$( { file_state /etc/systemd/system/gpuhosts-node-exporter.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-node-exporter.service' "$( { systemd_state gpuhosts-node-exporter.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-node-exporter.service' "$( { systemd_exec gpuhosts-node-exporter.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-node-exporter.service' "$( { systemd_property_of Environment gpuhosts-node-exporter.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-node-exporter.service' "$( { systemd_property_of User gpuhosts-node-exporter.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-node-exporter.service' "$( { systemd_dropins gpuhosts-node-exporter.service; } 2>/dev/null || true)"
emit_facts
