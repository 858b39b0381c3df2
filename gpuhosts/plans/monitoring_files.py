"""MonitoringFiles: what a Prometheus and a Grafana the user runs read to watch the stack, written on the host (the
training node) under `gpuhosts:monitoring.filesDir`: alert rules, file_sd targets and a scrape fragment per place,
dashboards and their provisioning file (gpuhosts/plans/observability.py). Each file is a fact by its digest, so a
rule file deleted or edited by hand is drift that `up` writes back; teardown removes only these files."""

from __future__ import annotations

import posixpath

from gpuhosts.facts import desired, files_facts, render_probe
from gpuhosts.observability import Watch
from gpuhosts.plans.dcgm_exporter import COUNTERS, folders_above, plan_dcgm_exporter
from gpuhosts.plans.node_exporter import plan_node_exporter
from gpuhosts.plans.observability import render_observability
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit

KEY = "monitoring-files"


def monitoring_files(watch: Watch) -> list[HostFile]:
    root = watch.spec.files_dir
    # The DCGM exporter's counters belong to its own unit, which restarts the exporter when they change.
    return [HostFile(f"{root}/{path}", text) for path, text in sorted(render_observability(watch, root).items())
            if path != COUNTERS]


def plan_monitoring_files(watch: Watch, needs: tuple[str, ...] = ()) -> Unit:
    files = monitoring_files(watch)
    root = watch.spec.files_dir
    dirs = {d for f in files for d in _parents(posixpath.dirname(f.path), root)} | set(folders_above(root))
    dirs = sorted(dirs, key=lambda d: (-len(d), d))
    facts = files_facts(files)
    return Unit(
        key=KEY, kind="MonitoringFiles",
        ensure=render("monitoring_files/ensure.sh.j2", unit=KEY, files=files, root_dir=root,
                      summary=f"Alert rules, scrape targets and dashboards of {watch.stack} in {root}."),
        teardown=render("monitoring_files/teardown.sh.j2", unit=KEY, root_dir=root, remove=[f.path for f in files],
                        empty_dirs=dirs),
        probe=render_probe(KEY, facts), desired=desired(facts), needs=needs, files=tuple(files),
        undoes=f"the {len(files)} rule, target and dashboard file(s) gpuhosts wrote in {root} removed")


def _parents(directory: str, root: str) -> list[str]:
    """`directory` and each folder above it up to `root`, which is included: teardown empties them in that order."""
    found = []
    while directory.startswith(root):
        found.append(directory)
        if directory == root:
            break
        directory = posixpath.dirname(directory)
    return found


def plan_monitoring(watch: Watch, needs: tuple[str, ...], gpu_needs: tuple[str, ...] | None) -> list[Unit]:
    """The units of `gpuhosts:monitoring` on one host: the node exporter, the DCGM exporter where the driver runs
    (after `gpu_needs`; None where there is none), and the files a Prometheus reads."""
    spec = watch.spec
    units = [plan_node_exporter(spec, needs)]
    if gpu_needs is not None:
        units.append(plan_dcgm_exporter(spec, gpu_needs))
    # The files after the exporters they describe: torn down first, so the exporter that goes last (the DCGM
    # exporter, whose counters share the folder) finds the folders empty and removes them; torn down at once, each
    # would find the other's files there.
    units.append(plan_monitoring_files(watch, tuple(dict.fromkeys((*needs, *(u.key for u in units))))))
    return units
