"""DcgmExporter: NVIDIA's DCGM exporter where the driver runs (the Proxmox host, the training node), run by a unit
of gpuhosts on `gpuhosts:monitoring.bind` (loopback by default) with the counters file the alert rules and
dashboards read (gpuhosts/observability.py counters_csv).

Installed as NVIDIA lays it out for a host (NVIDIA/dcgm-exporter 4.5.3-4.8.2, 691c92762eb551313c825f6efe4ceeee20982801):
the program at /usr/bin/dcgm-exporter and its counters under /etc/dcgm-exporter/ (Makefile `install`), the host
package's unit nvidia-dcgm-exporter.service running `/usr/bin/dcgm-exporter -f
/etc/dcgm-exporter/default-counters.csv` (packaging/config-files/systemd/), which listens on `-a`'s default ":9400",
every address (pkg/cmd/app.go CLIAddress); DCGM itself is a requirement of the exporter (README "Building from
Source": DCGM installed), the datacenter-gpu-manager-4 packages of NVIDIA's CUDA repository. The host package's
name is the one the repository's packaging scripts build (hack/package/test.sh PACKAGE_NAME, at a later commit,
7ad58324b4447b64dc3dedf946b889b648b7f476); both come from NVIDIA's CUDA repository for the distribution, which the
host must have configured."""

from __future__ import annotations

import posixpath

from gpuhosts.config import MonitoringSpec
from gpuhosts.observability import counters_csv
from gpuhosts.plans.exporter import Exporter, listen_address, plan_exporter
from gpuhosts.render import HostFile
from gpuhosts.units import Unit

KEY = "dcgm-exporter"
UNIT_NAME = "gpuhosts-dcgm-exporter.service"
PACKAGES = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-exporter")
PROGRAM = "/usr/bin/dcgm-exporter"
COUNTERS = "dcgm-exporter/gpuhosts-counters.csv"


def folders_above(root: str) -> tuple[str, ...]:
    """`root` and, when it is /etc/gpuhosts/<name>, /etc/gpuhosts: the folders the first of gpuhosts' monitoring
    files made, which whichever of its units is torn down last removes once they are empty."""
    parent = posixpath.dirname(root)
    return (root, parent) if posixpath.basename(parent) == "gpuhosts" else (root,)


def counters_path(spec: MonitoringSpec) -> str:
    return f"{spec.files_dir}/{COUNTERS}"


def plan_dcgm_exporter(spec: MonitoringSpec, needs: tuple[str, ...]) -> Unit:
    listen = listen_address(spec.bind, spec.dcgm_exporter_port)
    counters = HostFile(counters_path(spec), counters_csv())
    return plan_exporter(Exporter(
        key=KEY, kind="DcgmExporter", unit_name=UNIT_NAME, packages=PACKAGES,
        package_unit="nvidia-dcgm-exporter.service", package_listens="dcgm-exporter's default -a :9400",
        program=PROGRAM, argv=(PROGRAM, "-f", counters.path, "-a", listen), listen=listen,
        port_field="gpuhosts:monitoring.dcgmExporterPort",
        description="NVIDIA DCGM exporter", documentation="https://github.com/NVIDIA/dcgm-exporter",
        extra_files=(counters,), empty_dirs=folders_above(spec.files_dir),
        repository="NVIDIA's CUDA repository for this distribution must be configured",
        versions=((PACKAGES[0], spec.dcgm_version, "gpuhosts:monitoring.dcgmVersion"),
                  (PACKAGES[1], spec.dcgm_exporter_version, "gpuhosts:monitoring.dcgmExporterVersion"))),
        needs)
