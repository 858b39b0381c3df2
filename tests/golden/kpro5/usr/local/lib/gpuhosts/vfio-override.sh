#!/bin/sh
# managed by gpuhosts — runs from modprobe.d before vfio-pci loads: every function of these slots goes to vfio-pci.
# It also runs in the initramfs (an initramfs-tools hook copies it there), where the shell may be busybox's and
# only sysfs is mounted: so sh builtins only. GPUHOSTS_HOST_ROOT and GPUHOSTS_SYSFS_HOOK are unset on a real host
# (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
for dev in "$root"/sys/bus/pci/devices/0000:01:00.* "$root"/sys/bus/pci/devices/0000:21:00.*; do
  if [ -w "$dev/driver_override" ]; then
    echo vfio-pci >"$dev/driver_override"
    if [ -n "${GPUHOSTS_SYSFS_HOOK:-}" ]; then
      "$GPUHOSTS_SYSFS_HOOK" "${dev#"$root"}/driver_override"
    fi
  fi
done
exit 0
