"""A scratch root for `systemd-analyze verify`: the system's own unit files the rendered units name, an
executable at every path they start (`scratch_root`, registered in conftest.py), and the verify itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
import pytest


SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def verify(root: Path, unit: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", str(unit)], capture_output=True, text=True)


@pytest.fixture
def scratch_root(tmp_path) -> Path:
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing: `make system-deps` installs it"
    shutil.copytree(SYSTEM_UNITS, tmp_path / "usr/lib/systemd/system", symlinks=True)
    return tmp_path


def place(root: Path, path: str, content: str) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    for command in re.findall(r"^Exec\w*=[-@!+]*(/\S+)", content, flags=re.M):
        stand_in = root / command.lstrip("/")
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\n")
        stand_in.chmod(0o755)
    return target
