"""gpuhosts' program with the host's component type renamed in code (`gpuhosts:host:ProxmoxHost` to
`gpuhosts:host:GpuHost`), without an alias: every unit's parent chain, so its URN, changes and the engine creates it
anew and deletes the old one last. Copied over a project copy's __main__.py; it runs today's __main__.py (today.py)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pulumi

registered = pulumi.ComponentResource.__init__


def renamed(self, type_, *args, **kwargs):
    registered(self, "gpuhosts:host:GpuHost" if type_ == "gpuhosts:host:ProxmoxHost" else type_, *args, **kwargs)


pulumi.ComponentResource.__init__ = renamed
runpy.run_path(str(Path(__file__).with_name("today.py")), run_name="__main__")
