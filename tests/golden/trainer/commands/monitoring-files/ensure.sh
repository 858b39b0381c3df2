# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=monitoring-files]
# Alert rules, scrape targets and dashboards of trainer in /etc/gpuhosts/monitoring.
install_file /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-trainer-training.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-trainer-training.json sha256:ad74dce5071f4da4]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml sha256:d5e78d960e8cc7f8]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-dcgm.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/trainer-dcgm.json sha256:89280ba74ece7a7c]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-hidden-state-server.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/trainer-hidden-state-server.json sha256:9704bb3927253d52]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-node.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/trainer-node.json sha256:95d9e8aeed0c1d57]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/trainer-training-monitor.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/trainer-training-monitor.json sha256:3564d7aa87ce0688]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml sha256:25e116e0b93e8255]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/scrape-trainer.yml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/scrape-trainer.yml sha256:d1158db0176ed7a7]
GPUHOSTS_EOF
say '8 file(s) in /etc/gpuhosts/monitoring for a Prometheus and a Grafana to read'
finish
