"""The provider's log: one line per unit operation (`gpuhosts-unit: …`) and per SSH dial (`gpuhosts-ssh: …`).

`gpuhosts check` writes it to its stderr. Under the Pulumi engine every line a provider writes to stderr becomes a
diagnostic of the stack (severity info#err), printed after every `preview`, `up` and `refresh`: one line per probe
would bury what an operator must read. So once the engine configures the provider (`to_configured_destination`),
the lines go to the file GPUHOSTS_PROVIDER_LOG names, appended to, and nowhere when it is unset. Never a secret
here: unit names, statuses and figures only.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

DESTINATION_VARIABLE = "GPUHOSTS_PROVIDER_LOG"

_lock = threading.Lock()
_destination: TextIO | None = sys.stderr


def write(line: str) -> None:
    """One write per line, newline included, so that the lines of the units' threads never run together."""
    with _lock:
        if _destination is None:
            return
        _destination.write(line + "\n")
        _destination.flush()


def to_configured_destination() -> None:
    global _destination
    path = os.environ.get(DESTINATION_VARIABLE, "")
    with _lock:
        if _destination not in (None, sys.stderr):
            _destination.close()
        _destination = open(path, "a", encoding="utf-8") if path else None
