# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=monitoring-files]
# Remove the files gpuhosts wrote in /etc/gpuhosts/monitoring, then the folders they leave empty; nothing else.
remove_file /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-kpro5-inference.json
remove_file /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/ct129-engines.json
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/host-dcgm.json
remove_file /etc/gpuhosts/monitoring/prometheus/file_sd/host-node.json
remove_file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml
remove_file /etc/gpuhosts/monitoring/prometheus/scrape-ct129.yml
remove_file /etc/gpuhosts/monitoring/prometheus/scrape-host.yml
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
