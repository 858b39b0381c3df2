"""NodeExporter: Debian's prometheus-node-exporter, run by a unit of gpuhosts on `gpuhosts:monitoring.bind`
(loopback by default), on the Proxmox host and on the training node."""

from __future__ import annotations

from gpuhosts.config import MonitoringSpec
from gpuhosts.plans.exporter import Exporter, listen_address, plan_exporter
from gpuhosts.units import Unit

KEY = "node-exporter"
UNIT_NAME = "gpuhosts-node-exporter.service"
PACKAGE = "prometheus-node-exporter"
# Debian 12's package (prometheus-node-exporter 1.5.0-1+b6, the catalog's 1.5.0 row; read from the installed
# package): /usr/bin/prometheus-node-exporter, run by its own prometheus-node-exporter.service as the `prometheus`
# user its postinst creates, with ARGS="" from /etc/default/prometheus-node-exporter, so on node_exporter's default
# `--web.listen-address` ":9100", every address; its postinst enables and starts that unit through
# deb-systemd-invoke, which starts only a unit `systemctl is-enabled` calls enabled (init-system-helpers 1.65.2),
# so a mask made before the install keeps it stopped (and deb-systemd-helper unmask lifts only masks of its own).
PROGRAM = "/usr/bin/prometheus-node-exporter"


def plan_node_exporter(spec: MonitoringSpec, needs: tuple[str, ...]) -> Unit:
    listen = listen_address(spec.bind, spec.node_exporter_port)
    return plan_exporter(Exporter(
        key=KEY, kind="NodeExporter", unit_name=UNIT_NAME, packages=(PACKAGE,),
        package_unit="prometheus-node-exporter.service", package_listens="node_exporter's default :9100",
        program=PROGRAM, argv=(PROGRAM, f"--web.listen-address={listen}"), listen=listen,
        port_field="gpuhosts:monitoring.nodeExporterPort", user="prometheus",
        description="Prometheus node exporter", documentation="https://github.com/prometheus/node_exporter"), needs)

