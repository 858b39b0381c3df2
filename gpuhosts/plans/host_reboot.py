"""HostReboot: reboots the host when an earlier unit left the reboot marker; the provider waits for it to return.

The marker lives in /run (a tmpfs), so the probe sees a pending reboot as drift of this unit and a reboot clears
it by itself. The ensure only schedules the reboot and reports the boot id it leaves; the host-unit provider then
re-dials until another boot id answers (gpuhosts/provider.py, `await_reboot`).
"""

from __future__ import annotations

from gpuhosts.config import StackConfig
from gpuhosts.facts import Fact, desired, render_probe
from gpuhosts.render import render
from gpuhosts.units import Unit

UNIT = "reboot"
REBOOT_DELAY_SECONDS = 5


def plan_host_reboot(config: StackConfig, needs: tuple[str, ...]) -> Unit:
    facts = [Fact("reboot pending", '[ -e "$root/run/gpuhosts/reboot-required" ] && echo yes || echo no', "no")]
    return Unit(
        key=UNIT,
        kind="HostReboot",
        ensure=render("host_reboot/reboot.sh.j2", unit=UNIT, delay_seconds=REBOOT_DELAY_SECONDS),
        teardown=render("common/nothing.sh.j2", unit=UNIT, reason="a reboot leaves nothing to undo"),
        probe=render_probe(UNIT, facts),
        desired=desired(facts),
        needs=needs,
        undoes="nothing: the host is no longer rebooted by gpuhosts (allowReboot off)",
    )
