# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=monitoring-files]
# Remove the files gpuhosts wrote in /etc/gpuhosts/monitoring, then the folders they leave empty; nothing else.
remove_file /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-trainer-training.json
remove_file /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-dcgm.json
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-hidden-state-server.json
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-node.json
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-training-monitor.json
remove_file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml
remove_file /etc/gpuhosts/monitoring/prometheus/scrape-trainer.yml
rmdir "$root"/etc/gpuhosts/monitoring/grafana/provisioning/dashboards 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring/grafana/provisioning 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring/grafana/dashboards 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring/prometheus/file_sd 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring/prometheus/rules 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring/prometheus 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring/grafana 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring 2>/dev/null || true
rmdir "$root"/etc/gpuhosts 2>/dev/null || true
finish
