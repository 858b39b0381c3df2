"""The deploy gate's script as the containers receive it: gpuhosts/hostside/gate_probe.py's own source, which runs
there with only the standard library and prometheus_client."""

from __future__ import annotations

from pathlib import Path

from gpuhosts.hostside import gate_probe
from gpuhosts.render import HostFile, render

GATE_SCRIPT = "/usr/local/lib/gpuhosts/deploy-gate.py"


def render_gate_script() -> HostFile:
    return HostFile(GATE_SCRIPT, render("common/hostside-script.py.j2", path=GATE_SCRIPT,
                                        source=Path(gate_probe.__file__).read_text().rstrip("\n")), "0755")
