"""A clean `up` of the kpro5 stack from the seed, with the host and state copied before each of its commands.

Fault cases start from those copies: cutting command k of a fresh `up` is the same as cutting the first command of an
`up` that starts where a clean one stood before command k, and only the cut command and the ones after it run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from sshhost.bed import Bed
from sshhost.executor import Fault

ORDER = ["kpro5-vfio-binding", "kpro5-nvidia-driver", "kpro5-nvidia-uvm-at-boot", "kpro5-ct129-gpu-devices",
         "kpro5-ct129-nvidia-userspace"]
# Where in a command the connection drops: this share of the time the command took in a clean `up`.
MID_COMMAND = 0.5
# host: the host's side of the connection dies with its command; client: the client's end is killed, and the
# command runs on at the host until it next writes to the closed connection (or to its end).
DROPS = ("host", "client")
# Commands that fail half-way: (command on the host, its arguments (glob), matching calls that still work,
# the error it prints, the unit it fails in).
HALF_WAY = [
    ("update-initramfs", "*", 0, "update-initramfs: failed: No space left on device", "kpro5-vfio-binding"),
    ("pct", "set *--dev*", 1, "unable to write lxc config: got timeout", "kpro5-ct129-gpu-devices"),
]


@dataclass
class Ladder:
    bed: Bed
    plan: Path
    start: str                  # digest of the seed
    converged: str              # digest after the clean `up`
    steps: list[Path]           # steps[k]: the host and state before command k (0-based)
    seconds: list[float]        # how long command k took


def build_ladder(root: Path) -> Ladder:
    bed = Bed.seed(root / "clean")
    start = bed.digest()
    plan = bed.plan()
    steps: list[Path] = []

    def keep():
        step = root / f"before-{len(steps)}"
        shutil.copytree(bed.tree, step / "kpro5", symlinks=True)
        if bed.executor.state_file.exists():
            shutil.copy(bed.executor.state_file, step / "state.json")
        steps.append(step)

    keep()
    runs = bed.up(plan=plan, on_applied=lambda run: keep())
    if [r.name for r in runs] != ORDER:
        raise AssertionError(f"a clean up ran {[r.name for r in runs]}, not {ORDER}")
    return Ladder(bed, plan, start, bed.digest(), steps[:-1], [r.seconds for r in runs])


def bed_before(ladder: Ladder, index: int, root: Path) -> Bed:
    """A bed of its own where the clean `up` stood before command `index`."""
    step = ladder.steps[index]
    source = Bed.__new__(Bed)
    source.tree, source.run_file, source.sha256 = step / "kpro5", ladder.bed.run_file, ladder.bed.sha256
    source.executor = type("Stored", (), {"state_file": step / "state.json"})()
    return Bed.copy_of(source, root)


def converges(bed: Bed, plan: Path, first: str) -> None:
    """The next `up` starts again at `first`, reaches the declared state, and a further `up` runs nothing."""
    runs = bed.up(plan=plan)
    names = [r.name for r in runs]
    assert names == ORDER[ORDER.index(first):], names
    problems = bed.problems()
    assert problems == [], problems
    again = bed.up(plan=plan)
    assert again == [], [r.name for r in again]


def drop(bed: Bed, how: str, clean_seconds: float) -> Fault:
    """The first command of the next `up` loses its connection `how`, mid-command."""
    if how == "host":
        def action(client):
            bed.ssh.kill_connections()
    elif how == "client":
        def action(client):
            client.kill()
    else:
        raise ValueError(how)
    return Fault(at=1, action=action, after_seconds=clean_seconds * MID_COMMAND, label=f"{how} killed")
