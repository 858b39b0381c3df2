# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=monitoring-files]
# The probe of monitoring-files: reads the host and changes nothing; prints one facts line.
fact 'file /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-kpro5-inference.json' "$( { file_state /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-kpro5-inference.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml' "$( { file_state /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/ct129-engines.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/ct129-engines.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/host-dcgm.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/host-dcgm.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/host-node.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/host-node.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml' "$( { file_state /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/scrape-ct129.yml' "$( { file_state /etc/gpuhosts/monitoring/prometheus/scrape-ct129.yml; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/scrape-host.yml' "$( { file_state /etc/gpuhosts/monitoring/prometheus/scrape-host.yml; } 2>/dev/null || true)"
emit_facts
