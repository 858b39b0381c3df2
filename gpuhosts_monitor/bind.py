"""The one rule for where the monitor may listen without a token, shared with the stack's validation."""

from __future__ import annotations

import ipaddress


def is_loopback(bind: str) -> bool:
    """Only a loopback address keeps the monitor to the node itself (a name such as localhost is not accepted)."""
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False
