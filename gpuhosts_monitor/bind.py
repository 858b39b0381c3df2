"""The rule for where the monitor may listen without a token. The stack's validation holds the same rule
(gpuhosts/fields.py `is_loopback`), since the monitor runs on the node without gpuhosts; tests/test_monitor_deploy.py
keeps the two equal."""

from __future__ import annotations

import ipaddress


def is_loopback(bind: str) -> bool:
    """Only a loopback address keeps the monitor to the node itself (a name such as localhost is not accepted)."""
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False
