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
    # Package -> the Debian version it is held at (`apt-get install name=version`), and the stack field that says
    # so; a package without one takes the distribution's.
    versions: tuple[tuple[str, str, str], ...] = ()


def listen_address(bind: str, port: int) -> str:
    """host:port as Go's net.Listen reads it (both exporters are Go programs): an IPv6 address in brackets."""
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def package_fact(package: str, version: str | None = None) -> Fact:
    """Whether `package` is installed; with `version`, the version dpkg has of it, so a package upgraded or
    downgraded by hand is drift. The epoch is left out of what is compared where `version` has none (a deb's file
    name has none: datacenter-gpu-manager-exporter_4.8.2-1_amd64.deb)."""
    if version is None:
        return Fact(f"package {package}",
                    f"dpkg-query -W -f='${{Status}}' {package} 2>/dev/null | grep -q 'install ok installed' "
                    "&& echo installed || echo missing", "installed")
    strip = "" if ":" in version else " | sed 's/^[0-9]*://'"
    return Fact(f"package {package}",
                f"{{ dpkg-query -W -f='${{Status}} ${{Version}}' {package} 2>/dev/null | "
                f"sed -n 's/^install ok installed //p' | grep . || echo missing; }}{strip}", version)


def pins(exporter: Exporter) -> dict[str, tuple[str, str]]:
    """Package -> (the version it is held at, the stack field that says so)."""
    return {package: (version, field) for package, version, field in exporter.versions}


def plan_exporter(exporter: Exporter, needs: tuple[str, ...]) -> Unit:
    unit_file = HostFile(f"/etc/systemd/system/{exporter.unit_name}", render(
        "exporter/exporter.service.j2", summary=f"{exporter.description} on {exporter.listen}",
        description=f"{exporter.description} on {exporter.listen} (gpuhosts)", documentation=exporter.documentation,
        user=exporter.user, argv=list(exporter.argv)))
    files = [*exporter.extra_files, unit_file]
    held = pins(exporter)
    facts = [*(package_fact(p, held[p][0] if p in held else None) for p in exporter.packages), *files_facts(files),
             *systemd_unit_facts(unit_file)]
    values = dict(unit=exporter.key, unit_name=exporter.unit_name, package_unit=exporter.package_unit,
                  packages=list(exporter.packages), package_listens=exporter.package_listens,
                  versions=[held.get(p, ("", ""))[0] for p in exporter.packages],
                  version_fields=[held.get(p, ("", ""))[1] for p in exporter.packages],
                  program=exporter.program, port_field=exporter.port_field, listen=exporter.listen,
                  repository=exporter.repository, files=files,
                  summary=f"{exporter.description} "
                          f"({', '.join(f'{p}={held[p][0]}' if p in held else p for p in exporter.packages)}) "
                          f"on {exporter.listen}")
    dirs = sorted({posixpath.dirname(f.path) for f in exporter.extra_files} | set(exporter.empty_dirs),
                  key=lambda d: (-len(d), d))
    return Unit(
        key=exporter.key, kind=exporter.kind,
        ensure=render("exporter/ensure.sh.j2", **values),
        teardown=render("exporter/teardown.sh.j2", **values, remove=[f.path for f in files], empty_dirs=dirs),
        probe=render_probe(exporter.key, facts), desired=desired(facts), needs=needs, files=tuple(files),
        undoes=(f"{exporter.unit_name} stopped and removed with its {len(files)} file(s); "
                f"{', '.join(exporter.packages)} purged and {exporter.package_unit} unmasked only where gpuhosts "
                "installed them"))
