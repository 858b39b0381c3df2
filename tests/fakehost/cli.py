"""Entry point of the stand-ins in bin/: the program name picks the command."""
import sys

from .util import run_main

COMMANDS = {  # program -> (module, function)
    "pct": ("pve", "cmd_pct"), "qm": ("pve", "cmd_qm"), "hostname": ("pve", "cmd_hostname"),
    "nvidia-smi": ("nvtools", "cmd_nvidia_smi"), "nvidia-modprobe": ("nvtools", "cmd_nvidia_modprobe"),
    "nvidia-persistenced": ("nvtools", "cmd_nvidia_persistenced"),
    "nvidia-uninstall": ("nvtools", "cmd_nvidia_uninstall"), "fuser": ("nvtools", "cmd_fuser"),
    "modprobe": ("system", "cmd_modprobe"), "update-initramfs": ("system", "cmd_update_initramfs"),
    "proxmox-boot-tool": ("system", "cmd_proxmox_boot_tool"), "update-grub": ("system", "cmd_update_grub"),
    "pveversion": ("hostinfo", "cmd_pveversion"), "mokutil": ("hostinfo", "cmd_mokutil"), "dkms": ("dkms", "cmd_dkms"),
    "apt-get": ("system", "cmd_apt_get"), "dpkg-query": ("system", "cmd_dpkg_query"), "dpkg": ("system", "cmd_dpkg"),
    "uname": ("system", "cmd_uname"), "systemctl": ("systemd", "cmd_systemctl"), "reboot": ("boot", "cmd_reboot"),
    "fakehost-sysfs-hook": ("kernel", "main"), "journalctl": ("systemd", "cmd_journalctl"),
    "systemd-run": ("systemd", "cmd_systemd_run"), "pvesh": ("pve", "cmd_pvesh"),
    # not in bin/: these live inside a container's tree, where a script has to install them first
    "python3": ("pytools", "cmd_python3"), "venv-python": ("pytools", "cmd_venv_python"), "uv": ("pytools", "cmd_uv"),
    "vllm": ("pytools", "cmd_vllm"), "hf": ("hub", "cmd_hf"), "torchrun": ("pytools", "cmd_torchrun"),
    "speculators": ("pytools", "cmd_speculators"),
}


def main(prog, argv):
    import importlib
    mod, fn = COMMANDS[prog]
    if prog == "systemctl" and [a for a in argv if not a.startswith("-")][:1] == ["reboot"]:
        # systemctl(1) reboot: the host's reboot, as `reboot` itself (the boot model stands above systemd's).
        mod, fn = COMMANDS["reboot"]
    if prog == "fakehost-sysfs-hook":
        argv = ["sysfs-hook", *argv]
    return run_main(getattr(importlib.import_module(f"fakehost.{mod}"), fn), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
