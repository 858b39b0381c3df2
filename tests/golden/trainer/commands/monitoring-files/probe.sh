# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=monitoring-files]
# The probe of monitoring-files: reads the host and changes nothing; prints one facts line.
fact 'file /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-trainer-training.json' "$( { file_state /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-trainer-training.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml' "$( { file_state /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-dcgm.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-dcgm.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-hidden-state-server.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-hidden-state-server.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-node.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-node.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-training-monitor.json' "$( { file_state /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-training-monitor.json; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml' "$( { file_state /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml; } 2>/dev/null || true)"
fact 'file /etc/gpuhosts/monitoring/prometheus/scrape-trainer.yml' "$( { file_state /etc/gpuhosts/monitoring/prometheus/scrape-trainer.yml; } 2>/dev/null || true)"
emit_facts
