# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dcgm-exporter]
# The probe of dcgm-exporter: reads the host and changes nothing; prints one facts line.
# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-dcgm-exporter.service]="$(systemd_show gpuhosts-dcgm-exporter.service)"
fact 'package datacenter-gpu-manager-4-core' "$( { { dpkg-query -W -f='${Status} ${Version}' datacenter-gpu-manager-4-core 2>/dev/null | sed -n 's/^install ok installed //p' | grep . || echo missing; }; } 2>/dev/null || true)"
fact 'package datacenter-gpu-manager-exporter' "$( { { dpkg-query -W -f='${Status} ${Version}' datacenter-gpu-manager-exporter 2>/dev/null | sed -n 's/^install ok installed //p' | grep . || echo missing; } | sed 's/^[0-9]*://'; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/dcgm-exporter/gpuhosts-counters.csv' "$( { file_state /etc/gpuhosts/monitoring/dcgm-exporter/gpuhosts-counters.csv; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-dcgm-exporter.service' "$( { file_state /etc/systemd/system/gpuhosts-dcgm-exporter.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-dcgm-exporter.service' "$( { systemd_state gpuhosts-dcgm-exporter.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-dcgm-exporter.service' "$( { systemd_exec gpuhosts-dcgm-exporter.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-dcgm-exporter.service' "$( { systemd_property_of Environment gpuhosts-dcgm-exporter.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-dcgm-exporter.service' "$( { systemd_property_of User gpuhosts-dcgm-exporter.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-dcgm-exporter.service' "$( { systemd_dropins gpuhosts-dcgm-exporter.service; } 2>/dev/null || true)"
emit_facts
