"""Field rules shared by both kinds of stack: what a value may be before it can reach a host.

Every string of a stack is data that ends up in a bash script, a systemd unit or a path gpuhosts writes or deletes,
so these rules are as tight as the domain allows: no control characters anywhere, host names as RFC 1123 has
them, Hugging Face names in its own character set, paths absolute and normalised and never a system directory.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Any

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# RFC 1123 §2.1: labels of letters, digits and '-', not starting or ending with '-', 63 at most, 253 in all.
DNS_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
# huggingface_hub validate_repo_id: `namespace/name`, letters, digits, '-', '_', '.', at most 96 characters.
HF_REPO = re.compile(r"^(?=.{1,96}$)[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# A branch, tag or commit: git's ref-name characters without the ones git refuses (no '..', no leading '-').
HF_REVISION = re.compile(r"^(?!.*\.\.)[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}$")
# POSIX portable user names (IEEE Std 1003.1, 3.437) as useradd accepts them.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# Directories whose contents belong to the system or to Proxmox: never a place gpuhosts stores into or deletes.
SYSTEM_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
               "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib",
               "/var/log", "/var/cache", "/var/tmp", "/var/lib/vz", "/var/lib/lxc", "/var/lib/gpuhosts",
               "/opt/gpuhosts", "/usr/local")
# Trees that are the system's as a whole: nothing below them either.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr",
                "/var/lib/vz", "/var/lib/lxc", "/var/lib/gpuhosts", "/opt/gpuhosts")


def control_characters(value: Any) -> str | None:
    """The first string in `value` (a string, or lists and mappings of them) that holds a control character."""
    if isinstance(value, str):
        return value if CONTROL.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = control_characters(key) or control_characters(item)
            if found:
                return found
    if isinstance(value, (list, tuple)):
        for item in value:
            found = control_characters(item)
            if found:
                return found
    return None


def safe_directory(value: str, *, system_ok: tuple[str, ...] = ()) -> str:
    """An absolute, normalised directory that is not the system's; trailing slashes dropped."""
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path; write it from /")
    trimmed = value.rstrip("/") or "/"
    if ".." in trimmed.split("/") or posixpath.normpath(trimmed) != trimmed:
        raise ValueError(f"{value!r} is not a normalised path (no '.', '..' or '//'); write "
                         f"{posixpath.normpath(trimmed)!r}")
    if trimmed in SYSTEM_DIRS and trimmed not in system_ok:
        raise ValueError(f"{trimmed} is a system directory; use a directory of its own below it (e.g. {trimmed.rstrip('/')}/models)")
    for tree in SYSTEM_TREES:
        if trimmed.startswith(tree + "/") and trimmed not in system_ok:
            raise ValueError(f"{trimmed} lies in {tree}, which belongs to the system; use a data directory "
                             "(e.g. /srv/models/…, /tank/models)")
    return trimmed


def below(path: str, root: str) -> bool:
    """`path` is `root` or lies under it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def ip_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        hint = " (write 127.0.0.1)" if value == "localhost" else ""
        raise ValueError(f"{value!r} is not an IP address{hint}; give the address to listen on, e.g. 127.0.0.1 or "
                         "0.0.0.0") from None


def binds_meet(a: str, b: str) -> bool:
    """Whether two listeners on one port of one machine take the same address: the one rule of every port check.
    A wildcard takes every address of its family, and on Linux `::` takes IPv4 too (net.ipv6.bindv6only defaults to
    0, so a socket bound to :: accepts IPv4-mapped connections: ipv6(7)); so `::` meets every address, `0.0.0.0`
    every IPv4 one, and a second bind of a taken address fails with EADDRINUSE."""
    first, second = ipaddress.ip_address(a), ipaddress.ip_address(b)
    if first == second:
        return True
    for wildcard, other in ((first, second), (second, first)):
        if wildcard.is_unspecified and (wildcard.version == 6 or other.version == 4):
            return True
    return False


def local_address(bind: str) -> str:
    """Where a client on the same machine reaches a listener: a wildcard answers on loopback (`::` as well, being
    dual-stack), any other address on itself."""
    return "127.0.0.1" if ipaddress.ip_address(bind).is_unspecified else bind


def did_you_mean(name: str, candidates) -> str | None:
    """The one candidate `name` most likely misspells (difflib's ratio of at least 0.8), or None."""
    import difflib

    found = difflib.get_close_matches(name, sorted(set(candidates) - {name}), n=1, cutoff=0.8)
    return found[0] if found else None


def is_loopback(bind: str) -> bool:
    """Only a loopback address keeps a listener to the host itself (a name such as localhost is not accepted). The
    training monitor applies the same rule when it starts (gpuhosts_monitor/bind.py, shipped without gpuhosts);
    tests/test_monitor_deploy.py keeps the two equal."""
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def host_address(value: str) -> str:
    """An SSH target: an IP address or an RFC 1123 DNS name."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        if re.fullmatch(r"[0-9.]+", value):
            # All-numeric labels are no DNS name (a top-level domain is never all digits, RFC 3696 section 2).
            raise ValueError(f"{value!r} is not an IP address: write four numbers of 0 to 255, e.g. 10.20.0.15") \
                from None
        if DNS_NAME.match(value):
            return value
        user, at, host = value.rpartition("@")
        if at and user and host:
            raise ValueError(f"{value!r} holds a user name: write host: {host} and the user apart, as user: {user}") \
                from None
        raise ValueError(f"{value!r} is neither an IP address nor a DNS name") from None


# Values that only stand in for the real one: a documentation address (RFC 5737, RFC 3849), an example or internal
# domain name (RFC 2606, RFC 6762 appendix G), a digest of one repeated digit.
_DOCUMENTATION_NETS = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",
                                                               "2001:db8::/32"))
_EXAMPLE_DOMAINS = re.compile(r"(^|\.)(example|invalid|test|localhost|internal)(\.[a-z]+)?$|(^|\.)example\.(com|net|org)$")


def placeholder_address(value: str) -> bool:
    try:
        return any(ipaddress.ip_address(value) in net for net in _DOCUMENTATION_NETS)
    except ValueError:
        return bool(_EXAMPLE_DOMAINS.search(value.lower()))


# The host keys and the `.run` digest the committed stack files ship beside their documentation addresses: stand-ins
# until the operator puts in the host's own (tests/test_field_rules.py holds the committed files to these lists).
PLACEHOLDER_HOST_KEYS = frozenset({
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICsXHjlWhs3f2mkHV9MvWFYYsUeqST3abeFnm/3cM+DA",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJHRtGTqxkwugNyskqpNqnbrwKAnwr6Wj+T0WscdlCP",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF3Zb0dQn1q1d0c7oVw9b6r3XJm1Yy8QwqvUo0b1RZt7",
})
PLACEHOLDER_DIGESTS = frozenset({"5d3fbb2b2a2bd9b3d0a6c3a9b1bd8e1f8b7ad0b7e0b1c3f6f1f1c8d5a9e6b7c4"})


def placeholder_digest(value: str) -> bool:
    return len(set(value)) == 1 or value in PLACEHOLDER_DIGESTS


def placeholder_host_key(value: str | None) -> bool:
    return value is not None and " ".join(value.split()[:2]) in PLACEHOLDER_HOST_KEYS


def placeholder_url(value: str) -> bool:
    from urllib.parse import urlsplit

    host = urlsplit(value).hostname
    return host is not None and placeholder_address(host)
