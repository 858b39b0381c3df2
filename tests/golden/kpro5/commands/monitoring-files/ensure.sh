# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=monitoring-files]
# Alert rules, scrape targets and dashboards of kpro5 in /etc/gpuhosts/monitoring.
install_file /etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-kpro5-inference.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/grafana/dashboards/gpuhosts-kpro5-inference.json sha256:a72dc21087943172]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/grafana/provisioning/dashboards/gpuhosts.yaml sha256:d5e78d960e8cc7f8]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/ct129-engines.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/ct129-engines.json sha256:71366894fcedc618]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/host-dcgm.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/host-dcgm.json sha256:27423b321880fb66]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/file_sd/host-node.json 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/file_sd/host-node.json sha256:5b9da0d4ddfbd269]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml sha256:375a42ea82faa9d9]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/scrape-ct129.yml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/scrape-ct129.yml sha256:8e85bec649e95776]
GPUHOSTS_EOF
install_file /etc/gpuhosts/monitoring/prometheus/scrape-host.yml 0644 <<'GPUHOSTS_EOF'
# [content: etc/gpuhosts/monitoring/prometheus/scrape-host.yml sha256:f7f9ad5097d6d59d]
GPUHOSTS_EOF
say '8 file(s) in /etc/gpuhosts/monitoring for a Prometheus and a Grafana to read'
finish
