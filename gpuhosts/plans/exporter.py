"""The shape both exporters share: a distribution package whose own unit stays masked, and a unit of gpuhosts'
that runs the package's program where the stack says (`gpuhosts:monitoring.bind`). NodeExporter and DcgmExporter
(node_exporter.py, dcgm_exporter.py) give the package, the program and its flags."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from gpuhosts.facts import Fact, desired, files_facts, render_probe, systemd_unit_facts
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit


@dataclass(frozen=True)
class Exporter:
    key: str
    kind: str
    unit_name: str
    packages: tuple[str, ...]
    # The package's own unit, masked when gpuhosts installs the package, and how it would listen.
    package_unit: str
    package_listens: str
    program: str
    argv: tuple[str, ...]
    listen: str
    port_field: str
    description: str
    documentation: str
    user: str = ""
    # Files of its own beside the unit file (the DCGM exporter's counters).
    extra_files: tuple[HostFile, ...] = ()
    # Folders the teardown removes once empty, innermost first (besides the extra files' own).
    empty_dirs: tuple[str, ...] = ()
    # Where the packages come from, when it is not the distribution (said in the refusal when apt cannot find them).
    repository: str = ""


def listen_address(bind: str, port: int) -> str:
    """host:port as Go's net.Listen reads it (both exporters are Go programs): an IPv6 address in brackets."""
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def package_fact(package: str) -> Fact:
    return Fact(f"package {package}",
                f"dpkg-query -W -f='${{Status}}' {package} 2>/dev/null | grep -q 'install ok installed' "
                "&& echo installed || echo missing", "installed")


def plan_exporter(exporter: Exporter, needs: tuple[str, ...]) -> Unit:
    unit_file = HostFile(f"/etc/systemd/system/{exporter.unit_name}", render(
        "exporters/exporter.service.j2", summary=f"{exporter.description} on {exporter.listen}",
        description=f"{exporter.description} on {exporter.listen} (gpuhosts)", documentation=exporter.documentation,
        user=exporter.user, argv=list(exporter.argv)))
    files = [*exporter.extra_files, unit_file]
    facts = [*(package_fact(p) for p in exporter.packages), *files_facts(files), *systemd_unit_facts(unit_file)]
    values = dict(unit=exporter.key, unit_name=exporter.unit_name, package_unit=exporter.package_unit,
                  packages=list(exporter.packages), package_listens=exporter.package_listens,
                  program=exporter.program, port_field=exporter.port_field, listen=exporter.listen,
                  repository=exporter.repository, files=files,
                  summary=f"{exporter.description} ({', '.join(exporter.packages)}) on {exporter.listen}")
    dirs = sorted({posixpath.dirname(f.path) for f in exporter.extra_files} | set(exporter.empty_dirs),
                  key=lambda d: (-len(d), d))
    return Unit(
        key=exporter.key, kind=exporter.kind,
        ensure=render("exporters/ensure.sh.j2", **values),
        teardown=render("exporters/teardown.sh.j2", **values, remove=[f.path for f in files], empty_dirs=dirs),
        probe=render_probe(exporter.key, facts), desired=desired(facts), needs=needs, files=tuple(files),
        undoes=(f"{exporter.unit_name} stopped and removed with its {len(files)} file(s); "
                f"{', '.join(exporter.packages)} purged and {exporter.package_unit} unmasked only where gpuhosts "
                "installed them"))
