"""Desired facts and the probe that observes them, declared together so that they cannot disagree.

A `Fact` is a name (what `pulumi preview` shows under `facts`), a bash expression run by the unit's probe that
prints the observed value as one line, and the value a host in the declared state gives. The probe is rendered
from the facts (templates/common/probe.sh.j2); the unit's `desired` dict is `{name: desired}`.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass

from gpuhosts.render import HostFile, render

MISSING = "missing"


@dataclass(frozen=True)
class Fact:
    """`desired` None: an observation only (a GPU's minor, a dynamic major), reported as the resource's output
    `observed` and never compared, since no plan can know it."""

    name: str
    probe: str
    desired: str | None


def observation(name: str, probe: str) -> Fact:
    return Fact(f"observed: {name}", probe, None)


def file_digest(content: str, mode: str) -> str:
    """What `file_state` in templates/common/lib.sh.j2 prints for a file with this content and mode."""
    return f"sha256:{hashlib.sha256(content.encode()).hexdigest()[:16]} mode:{int(mode, 8):o}"


def file_fact(file: HostFile) -> Fact:
    return Fact(f"file {file.path}", f"file_state {shlex.quote(file.path)}", file_digest(file.content, file.mode))


def files_facts(files) -> list[Fact]:
    return [file_fact(f) for f in files]


def systemd_fact(unit_name: str, *, enabled: bool = True, active: bool = True) -> Fact:
    """A systemd unit's enablement and activity, as `systemctl is-enabled` / `is-active` word them."""
    quoted = shlex.quote(unit_name)
    probe = f"{{ systemctl is-enabled {quoted}; systemctl is-active {quoted}; }} | paste -sd ' ' -"
    return Fact(f"systemd {unit_name}", probe,
                f"{'enabled' if enabled else 'disabled'} {'active' if active else 'inactive'}")


def render_probe(unit: str, facts: list[Fact], *, prelude: str = "", vmid: int | None = None,
                 container_facts: list[Fact] = (), container_prelude: str = "") -> str:
    """The probe script of a unit: read-only, one facts line. `container_facts` are observed inside container
    `vmid` through one `pct exec` (a running container's files are not visible from the host's side)."""
    names = [fact.name for fact in [*facts, *container_facts]]
    if len(names) != len(set(names)):
        raise ValueError(f"unit {unit}: two facts share a name")
    inner = ""
    if container_facts:
        inner = render("common/probe.sh.j2", unit=unit, facts=list(container_facts), prelude=container_prelude,
                       inner=None, vmid=None, container_fact_names=[])
    return render("common/probe.sh.j2", unit=unit, facts=list(facts), prelude=prelude, inner=inner.rstrip("\n"),
                  vmid=vmid, container_fact_names=[fact.name for fact in container_facts])


def desired(facts: list[Fact]) -> dict[str, str]:
    return {fact.name: fact.desired for fact in facts if fact.desired is not None}
