"""The vfio binding against modprobe.d as kmod reads it and the initramfs as mkinitramfs builds it (tests/fakehost).

vfio-pci may load in the initramfs, where only what the image holds can run; a hand-made `ids=` may sit in any of
kmod's directories, on a continued line, or on the kernel command line.
"""

from __future__ import annotations

import subprocess

import pytest

from fakehost import host_env, kernel
from fakehost.system import parse_initrd
from fakehost.util import kernel_release
from gpuhosts.protocol import parse_result
from simhost import A6000, RTX3090_FUNCTIONS, Host

OVERRIDE = "usr/local/lib/gpuhosts/vfio-override.sh"


def reboot(h: Host) -> None:
    done = subprocess.run(["reboot"], capture_output=True, text=True, env=host_env(h.tree))
    assert done.returncode == 0, done.stderr


def image(h: Host) -> dict:
    """The running kernel's image (the seed's kernel: tests/fakehost/tree.py)."""
    return parse_initrd((h.tree / f"boot/initrd.img-{kernel_release(h.tree)}").read_bytes())


def test_with_vfio_in_the_initramfs_the_3090s_stay_on_vfio_pci_after_a_reboot(host):
    """As many guides advise: the vfio modules in /etc/initramfs-tools/modules, so vfio-pci loads in the image."""
    modules = host.tree / "etc/initramfs-tools/modules"
    modules.write_text(modules.read_text() + "vfio\nvfio_iommu_type1\nvfio_pci\n")
    host.up()
    assert OVERRIDE in image(host), "the hook puts the override script into the image"
    reboot(host)
    assert kernel.kstate(host.tree)["modules"].index("vfio_pci") < kernel.kstate(host.tree)["modules"].index("nvidia")
    assert {f: host.driver(f) for f in RTX3090_FUNCTIONS} == dict.fromkeys(RTX3090_FUNCTIONS, "vfio-pci")
    assert {a: host.driver(a) for a in A6000} == dict.fromkeys(A6000, "nvidia")
    assert not any(parse_result(out).changed for out in host.up().values())


def test_teardown_takes_the_hook_out_of_the_image(host):
    host.up()
    vfio = host.unit("vfio-binding")
    host.apply(vfio, "teardown")
    assert not (host.tree / "etc/initramfs-tools/hooks/gpuhosts-vfio").exists()
    assert OVERRIDE not in image(host)


@pytest.mark.parametrize("in_image", [True, False], ids=["program in the image", "program only on the root"])
def test_an_install_command_in_the_initramfs_runs_only_programs_the_image_holds(host, in_image):
    """The simulated boot runs an initramfs install command against the image's files, not the live root."""
    marker = "/run/fakehost/initramfs-install-ran"
    program = host.tree / "usr/local/sbin/mark"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f'#!/bin/sh\n: >"$GPUHOSTS_HOST_ROOT{marker}"\n')
    program.chmod(0o755)
    (host.tree / "etc/modprobe.d/mark.conf").write_text(
        "install vfio_iommu_type1 /usr/local/sbin/mark; /sbin/modprobe --ignore-install vfio_iommu_type1\n")
    (host.tree / "etc/initramfs-tools/modules").write_text("vfio_iommu_type1\n")
    if in_image:
        hook = host.tree / "etc/initramfs-tools/hooks/mark"
        hook.write_text('#!/bin/sh\n[ "$1" = prereqs ] && exit 0\n. /usr/share/initramfs-tools/hook-functions\n'
                        'copy_exec "$GPUHOSTS_HOST_ROOT/usr/local/sbin/mark" /usr/local/sbin/mark\n')
        hook.chmod(0o755)
    made = host.run("update-initramfs -u -k all")
    assert made.returncode == 0, made.stderr
    reboot(host)
    assert (host.tree / marker.lstrip("/")).exists() == in_image
    assert kernel.is_loaded(host.tree, "vfio_iommu_type1")


# A hand-made ids= for the A6000s (10de:2230), which must stay with nvidia, where the old check did not look.
def lib_file(directory):
    def make(h: Host):
        path = h.tree / directory / "vfio-vendor.conf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("options vfio-pci ids=10de:2230\n")
    return make


def on_cmdline(word, configured=True):
    def make(h: Host):
        cmdline = h.tree / "etc/kernel/cmdline"
        plain = cmdline.read_text()
        cmdline.write_text(plain.strip() + f" {word}\n")
        assert h.run("proxmox-boot-tool refresh").returncode == 0
        reboot(h)
        assert h.driver(A6000[0]) == "vfio-pci", "the simulated kmod applies the kernel command line"
        if not configured:
            cmdline.write_text(plain)
            assert h.run("proxmox-boot-tool refresh").returncode == 0
    return make


REFUSED = [
    ("in /lib/modprobe.d", lib_file("lib/modprobe.d"),
     "/lib/modprobe.d/vfio-vendor.conf (line 1) sets options vfio-pci ids=10de:2230"),
    ("in /usr/lib/modprobe.d", lib_file("usr/lib/modprobe.d"), "/usr/lib/modprobe.d/vfio-vendor.conf (line 1)"),
    ("in /run/modprobe.d", lib_file("run/modprobe.d"), "/run/modprobe.d/vfio-vendor.conf (line 1)"),
    ("in /usr/local/lib/modprobe.d", lib_file("usr/local/lib/modprobe.d"),
     "/usr/local/lib/modprobe.d/vfio-vendor.conf (line 1)"),
    ("vfio-pci.ids= on the kernel command line", on_cmdline("vfio-pci.ids=10de:2230"),
     "the kernel command line carries vfio-pci.ids=10de:2230, which gives GPUs meant for nvidia to vfio-pci at "
     "every boot: remove it from /etc/kernel/cmdline"),
    ("vfio_pci.ids= on the kernel command line", on_cmdline("vfio_pci.ids=10de:2204,10de:2230"),
     "the kernel command line carries vfio-pci.ids=10de:2230"),
    ("ids= only on the running kernel's command line", on_cmdline("vfio-pci.ids=10de:2230", configured=False),
     "the running kernel was booted with vfio-pci.ids=10de:2230 (/proc/cmdline)"),
]


@pytest.mark.parametrize("make, says", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_an_ids_option_the_unit_cannot_rewrite_is_refused_with_where_it_is(host, make, says):
    make(host)
    vfio = host.unit("vfio-binding")
    for _ in range(2):  # the same answer every time, never a loop of reboots
        result = host.run(vfio.ensure)
        assert result.returncode != 0 and "refused:" in result.stderr, result.stdout + result.stderr
        assert says in result.stderr, result.stderr
    if "modprobe.d" in says:
        assert "put a copy of it without that option at /etc/modprobe.d/vfio-vendor.conf" in result.stderr


CONTINUED = "# vendor's layout\noptions vfio-pci \\\n    disable_vga=1 \\\n    ids=10de:2230\nblacklist snd_hda_codec_hdmi\n"


def test_a_continued_ids_line_in_etc_is_commented_out_whole_and_comes_back_on_teardown(host):
    conf = host.tree / "etc/modprobe.d/vfio-continued.conf"
    conf.write_text(CONTINUED)
    host.up()
    text = conf.read_text()
    assert text.splitlines()[0] == "# vendor's layout" and text.splitlines()[-1] == "blacklist snd_hda_codec_hdmi"
    assert all(line.startswith("# gpuhosts: ") for line in text.splitlines()[1:4]), text
    reboot(host)
    assert {a: host.driver(a) for a in A6000} == dict.fromkeys(A6000, "nvidia")
    assert {u.key: host.probe(u) == u.desired for u in host.units()} == {u.key: True for u in host.units()}
    host.destroy()
    assert conf.read_text() == CONTINUED


def test_a_lib_file_hidden_by_a_same_named_etc_file_is_not_refused(host):
    """kmod reads one file per name, the first directory's: the seed's /etc/modprobe.d/vfio.conf hides this one."""
    hidden = host.tree / "lib/modprobe.d/vfio.conf"
    hidden.write_text("options vfio-pci ids=10de:2230\n")
    host.up()
    assert hidden.read_text() == "options vfio-pci ids=10de:2230\n"
    reboot(host)
    assert {a: host.driver(a) for a in A6000} == dict.fromkeys(A6000, "nvidia")
