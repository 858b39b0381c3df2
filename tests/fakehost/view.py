"""Reading a simulated host's state the way a person checks a real one: drivers, files, minors, container devices."""

from __future__ import annotations

from pathlib import Path

from .tree import tree_digest


class HostView:
    """Mixed into whatever holds a simulated host; needs a ``tree`` attribute (the host's root)."""

    tree: Path

    def digest(self) -> str:
        return tree_digest(self.tree)

    def driver(self, address: str) -> str:
        link = self.tree / "sys/bus/pci/devices" / address / "driver"
        return link.resolve().name if link.is_symlink() else ""

    def text(self, path: str) -> str:
        return (self.tree / path.lstrip("/")).read_text()

    def minor(self, address: str) -> str:
        return self.text(f"/proc/driver/nvidia/gpus/{address}/information").split("Device Minor:")[1].split()[0]

    def container_devices(self, vmid: int = 129) -> list[str]:
        return [line.split(": ", 1)[1].split(",")[0] for line in self.text(f"/etc/pve/lxc/{vmid}.conf").splitlines()
                if line.startswith("dev") and ": " in line and line.split(":")[0][3:].isdigit()]
