"""What the host says about itself: ``pveversion`` and ``mokutil --sb-state``, printed from fixtures of their output.

``pveversion`` prints tests/fixtures/pve/pveversion-<pve_version>.txt with the running kernel put in (pve-manager
``bin/pveversion``: the package, ``version_text`` and ``POSIX::uname``'s release). ``mokutil --sb-state`` reads the
EFI variables ``SecureBoot`` and ``SetupMode`` from the tree's efivarfs as mokutil 0.6.0 ``sb_state`` does
(tests/fixtures/mokutil/README.md); ``efivars(secure_boot)`` is what the seed writes there.
"""
import sys

from . import TESTS
from .system import dpkg_list
from .util import Fail, kernel_release, root, settings

PVE_FIXTURES = TESTS / "fixtures/pve"
MOK_FIXTURE = TESTS / "fixtures/mokutil/sb-state.txt"
# The kernel the pveversion fixtures were written with is replaced by the running one.
FIXTURE_KERNELS = ("6.8.12-4-pve", "6.2.16-3-pve", "6.17.13-2-pve")
EFI_GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFIVARS = "sys/firmware/efi/efivars"
# EFI_VARIABLE_BOOTSERVICE_ACCESS | EFI_VARIABLE_RUNTIME_ACCESS, little-endian: efivarfs shows a variable as its
# four attribute bytes followed by its data (Linux Documentation/filesystems/efivarfs.rst, 2dcc51b3fe17).
ATTRIBUTES = b"\x06\x00\x00\x00"


def efivars(secure_boot: bool) -> dict:
    """relative path -> content of the efivarfs files mokutil and the driver's pre-flight read."""
    return {f"{EFIVARS}/SecureBoot-{EFI_GLOBAL}": ATTRIBUTES + (b"\x01" if secure_boot else b"\x00"),
            f"{EFIVARS}/SetupMode-{EFI_GLOBAL}": ATTRIBUTES + b"\x00"}


def cmd_pveversion(argv):
    if argv:
        raise Fail("USAGE: pveversion [--verbose]" if argv != ["--verbose"]
                   else "fakehost: only the short form of pveversion is simulated", 255)
    r = root()
    version = settings(r)["pve_version"]
    fixture = PVE_FIXTURES / f"pveversion-{version}.txt"
    if not fixture.exists():
        raise Fail(f"fakehost: no pveversion fixture for pve-manager {version} ({fixture.name})", 2)
    line = fixture.read_text()
    for k in FIXTURE_KERNELS:
        line = line.replace(k, kernel_release(r))
    sys.stdout.write(line)
    return 0


def _efivar(r, name):
    p = r / EFIVARS / f"{name}-{EFI_GLOBAL}"
    return p.read_bytes()[4:] if p.is_file() else None


def cmd_mokutil(argv):
    r = root()
    if "mokutil" not in dpkg_list(r):
        raise Fail("bash: mokutil: command not found", 127)
    if argv != ["--sb-state"]:
        raise Fail("fakehost: only mokutil --sb-state is simulated", 2)
    enabled, disabled, setup, unsupported = MOK_FIXTURE.read_text().splitlines()
    secureboot, setupmode = _efivar(r, "SecureBoot"), _efivar(r, "SetupMode")
    if secureboot is None:
        raise Fail(unsupported, 255)
    if secureboot == b"\x01" and setupmode == b"\x00":
        print(enabled)
    else:
        print(disabled)
        if setupmode == b"\x01":
            print(setup)
    return 0
