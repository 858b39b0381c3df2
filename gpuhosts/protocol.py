"""What a unit's scripts print back, defined once: the result line of ensure and teardown, the facts line of a probe.

Scripts are rendered with these prefixes (templates/common/lib.sh.j2 prints them), and everything that reads a
script's output (the host-unit provider, the tests, `make lifecycle`) parses it here and nowhere else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

RESULT_PREFIX = "GPUHOSTS_RESULT "
# A teardown that leaves the host as it is says why on a line of its own (templates/common/run.sh.j2).
SKIPPED_PREFIX = "GPUHOSTS_SKIPPED "
FACTS_PREFIX = "GPUHOSTS_FACTS "
# Printed before a script blocks on a host-side lock another unit holds; counted, never parsed for meaning.
LOCK_WAIT_PREFIX = "GPUHOSTS_LOCK_WAIT "


class ProtocolError(ValueError):
    pass


@dataclass(frozen=True)
class Result:
    """The last line of an ensure or teardown: did it change the host, does the host need a reboot, and what a
    unit reports (a deploy gate's measurements)."""

    changed: bool
    reboot_required: bool = False
    report: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        payload = {"changed": self.changed, "rebootRequired": self.reboot_required}
        if self.report:
            payload["report"] = self.report
        return RESULT_PREFIX + json.dumps(payload, sort_keys=True, separators=(",", ":"))


def _last_line(stdout: str, prefix: str) -> str | None:
    found = None
    for line in (stdout or "").splitlines():
        if line.startswith(prefix):
            found = line[len(prefix):]
    return found


def parse_result(stdout: str) -> Result:
    """The result a script printed; ProtocolError when it printed none (it stopped before its end)."""
    text = _last_line(stdout, RESULT_PREFIX)
    if text is None:
        raise ProtocolError("the script printed no result line; it stopped before its end")
    try:
        payload = json.loads(text)
        return Result(changed=bool(payload["changed"]), reboot_required=bool(payload.get("rebootRequired", False)),
                      report=dict(payload.get("report") or {}))
    except (ValueError, KeyError, TypeError) as error:
        raise ProtocolError(f"unreadable result line {text[:200]!r}: {error}") from None


def parse_facts(stdout: str) -> dict[str, Any]:
    """The observed facts a probe printed (one JSON object)."""
    text = _last_line(stdout, FACTS_PREFIX)
    if text is None:
        raise ProtocolError("the probe printed no facts line")
    try:
        facts = json.loads(text)
    except ValueError as error:
        raise ProtocolError(f"unreadable facts line {text[:200]!r}: {error}") from None
    if not isinstance(facts, dict):
        raise ProtocolError(f"the facts line is not a JSON object: {text[:200]!r}")
    return facts


def skipped(stdout: str) -> list[str]:
    """Why an operation left the host as it is, one reason a line; empty when it did its work."""
    return [line[len(SKIPPED_PREFIX):] for line in stdout.splitlines() if line.startswith(SKIPPED_PREFIX)]


def lock_waits(stdout: str) -> int:
    return sum(line.startswith(LOCK_WAIT_PREFIX) for line in (stdout or "").splitlines())


def tail(text: str, lines: int = 20, limit: int = 4000) -> str:
    """The end of a command's output, bounded in lines and characters, for an error message."""
    kept = (text or "").rstrip().splitlines()[-lines:]
    joined = "\n".join(kept)
    return joined if len(joined) <= limit else "…" + joined[-limit:]


# How long a unit waits for a lock another gpuhosts operation holds (apt, uv, a container's start) before it fails:
# longer than the slowest step that holds one (a driver's DKMS build, an engine's environment), short enough that a
# lock left by a hung process ends in an error, not a converge that never returns.
LOCK_TIMEOUT_S = 1800
