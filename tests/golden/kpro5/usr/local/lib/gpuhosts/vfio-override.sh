#!/bin/sh
# managed by gpuhosts — runs from modprobe.d before vfio-pci loads: every function of these slots goes to vfio-pci.
for dev in /sys/bus/pci/devices/0000:01:00.* /sys/bus/pci/devices/0000:21:00.*; do
  if [ -w "$dev/driver_override" ]; then
    echo vfio-pci >"$dev/driver_override"
  fi
done
exit 0
