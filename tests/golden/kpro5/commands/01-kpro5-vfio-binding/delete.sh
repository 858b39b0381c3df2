# managed by gpuhosts — unit vfio-binding; generated from templates/, do not edit on the host.
set -euo pipefail
umask 022
# Empty on a real host; the simulated host of the tests points it at its tree (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
unit=vfio-binding
# shellcheck disable=SC2034  # shared by every unit; not every unit keeps state
state_dir="$root/var/lib/gpuhosts"
changed=0
reboot_required=0
file_changed=0

say() { printf '%s: %s\n' "$unit" "$*"; }
refuse() { printf '%s: refused: %s\n' "$unit" "$*" >&2; exit 1; }
note_change() { changed=1; say "changed: $*"; }

# install_file PATH MODE < content — writes only when content or mode differ; sets file_changed.
# shellcheck disable=SC2034  # file_changed is read by the units that react to a change
install_file() {
  local target="$root$1" mode="$2" tmp
  file_changed=0
  mkdir -p "$(dirname "$target")"
  tmp="$(mktemp "$target.gpuhosts.XXXXXX")"
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$target" ] && cmp -s "$tmp" "$target" && [ "$(stat -c %a "$target")" = "$(stat -c %a "$tmp")" ]; then
    rm -f "$tmp"
    return 0
  fi
  mv -f "$tmp" "$target"
  file_changed=1
  note_change "wrote $1"
}

# remove_file PATH — sets file_changed.
# shellcheck disable=SC2034
remove_file() {
  file_changed=0
  if [ -e "$root$1" ] || [ -L "$root$1" ]; then
    rm -f "$root$1"
    file_changed=1
    note_change "removed $1"
  fi
}

# sysfs_write PATH VALUE — a write to a kernel control file (driver_override, bind, unbind, drivers_probe).
sysfs_write() {
  printf '%s\n' "$2" >"$root$1"
  if [ -n "${GPUHOSTS_SYSFS_HOOK:-}" ]; then
    "$GPUHOSTS_SYSFS_HOOK" "$1"
  fi
}

# --- host facts -------------------------------------------------------------------------------------------
# The loaded nvidia kernel module's version, empty when none is loaded. The version is found by its shape, not
# its column: /proc/driver/nvidia/version words it differently for the open and the proprietary module.
module_version() {
  if [ -r "$root/sys/module/nvidia/version" ]; then
    cat "$root/sys/module/nvidia/version"
  elif [ -r "$root/proc/driver/nvidia/version" ]; then
    grep -m1 '^NVRM version:' "$root/proc/driver/nvidia/version" | grep -oE '[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2,3})?' | head -n1
  fi
}

# The installed NVIDIA user space (the version in libnvidia-ml's file name), empty when none.
userspace_version() {
  local lib
  for lib in "$root"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*; do
    [ -e "$lib" ] || continue
    printf '%s\n' "${lib##*/libnvidia-ml.so.}"
    return 0
  done
}

# char_major NAME — the major of a character device in /proc/devices; nvidia-uvm's is dynamic.
char_major() {
  awk -v name="$1" '/^Character devices:/ {c = 1; next} /^Block devices:/ {c = 0} c && $2 == name {print $1; exit}' \
    "$root/proc/devices"
}

# gpu_minor ADDRESS — the GPU's minor under major 195, from the driver's own record (not PCI order).
gpu_minor() {
  local info="$root/proc/driver/nvidia/gpus/$1/information"
  [ -r "$info" ] || return 0
  sed -nE 's/^Device Minor:[[:space:]]*([0-9]+).*/\1/p' "$info"
}

# pci_driver ADDRESS — the driver bound to a PCI function, empty when unbound.
pci_driver() {
  local link="$root/sys/bus/pci/devices/$1/driver"
  if [ -L "$link" ]; then
    basename "$(readlink "$link")"
  fi
}

# slot_functions SLOT — every function of a PCI slot (GPU, HDMI audio, USB-C …) that the host has.
slot_functions() {
  local dev
  for dev in "$root/sys/bus/pci/devices/$1".*; do
    [ -e "$dev" ] && basename "$dev"
  done
  return 0
}

# Normalise nvidia-smi's "00000000:41:00.0" and lspci's "41:00.0" to sysfs's "0000:41:00.0".
normal_address() {
  local id="${1,,}"
  id="${id// /}"
  case "$id" in
    ????????:*) id="${id:4}" ;;
    ??:??.?|??:??) id="0000:$id" ;;
  esac
  printf '%s\n' "$id"
}

# smi_rows — nvidia-smi's `--format=csv,noheader` rows whose first field is a bus id, as "address field…".
smi_rows() {
  local bus rest
  while IFS=',' read -r bus rest; do
    [ -n "$bus" ] || continue
    rest="${rest//,/ }"
    printf '%s %s\n' "$(normal_address "$bus")" "$(printf '%s' "$rest" | xargs)"
  done
}

# owe NAME / owed NAME / settled NAME — work that must follow a change (rebuilding the initramfs) is noted on the
# host before the change, so a run cut off in between still does it next time.
owe() { mkdir -p "$state_dir"; : >"$state_dir/$1.owed"; }
owed() { [ -f "$state_dir/$1.owed" ]; }
settled() { rm -f "$state_dir/$1.owed"; }

finish() {
  if [ "$reboot_required" = 1 ]; then
    mkdir -p "$root/run/gpuhosts"
    : >"$root/run/gpuhosts/reboot-required"
    say "reboot required"
  fi
  if [ "$changed" = 1 ]; then
    say "done: changed"
  else
    say "done: no change"
  fi
}
# --- PCI binding helpers (shared by ensure and teardown) ----------------------------------------------------
driver_override() {
  local value
  value="$(cat "$root/sys/bus/pci/devices/$1/driver_override" 2>/dev/null || true)"
  [ "$value" = "(null)" ] || printf '%s\n' "$value"
}

# mapped_paths NAME — the PCI paths a cluster resource mapping (`hostpciN: mapping=NAME`) gives this node.
mapped_paths() {
  local node
  node="$(hostname)"
  [ -r "$root/etc/pve/mapping/pci.cfg" ] || return 0
  awk -v name="$1" -v node="$node" '
    /^[^[:space:]]/ {inside = ($1 == name); next}
    inside && $1 == "map" {
      this = ""; paths = ""
      n = split($2, kv, ",")
      for (i = 1; i <= n; i++) {
        if (kv[i] ~ /^node=/) this = substr(kv[i], 6)
        if (kv[i] ~ /^path=/) paths = substr(kv[i], 6)
      }
      if (this == node) print paths
    }' "$root/etc/pve/mapping/pci.cfg" | tr ';' ' '
}

# vms_using_slot SLOT — "vmid status" of every VM whose hostpciN names a function of SLOT, directly or through a
# resource mapping.
vms_using_slot() {
  local vmid status entry id
  while read -r vmid status; do
    while read -r entry; do
      if [ "${entry#mapping=}" != "$entry" ]; then
        entry="$(mapped_paths "${entry#mapping=}")"
      fi
      for id in ${entry//;/ }; do
        id="$(normal_address "$id")"
        if [ "${id%.*}" = "$1" ] || [ "$id" = "$1" ]; then
          printf '%s %s\n' "$vmid" "$status"
          break 2
        fi
      done
    done < <(qm config "$vmid" | sed -nE 's/^hostpci[0-9]+: ([^,]+).*/\1/p')
  done < <(qm list | awk 'NR > 1 {print $1, $3}')
}

# gpu_release_problem ADDRESS — why the nvidia driver cannot let go of this GPU now; empty when it can.
# Unbinding a held GPU from nvidia hangs in the kernel, so this is checked before any write.
gpu_release_problem() {
  local address="$1" minor bus_id pid
  if ! command -v fuser >/dev/null; then
    printf 'fuser is missing, so nothing can tell whether a process holds GPU %s: apt-get install psmisc\n' "$address"
    return 0
  fi
  minor="$(gpu_minor "$address")"
  if [ "$(nvidia-smi -i "$address" --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null || true)" = "Enabled" ]; then
    nvidia-smi -i "$address" -pm 0 >/dev/null 2>&1 || true
    if [ "$(nvidia-smi -i "$address" --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null || true)" = "Enabled" ]; then
      printf 'persistence mode holds GPU %s and stays on: run "nvidia-smi -i %s -pm 0" (stop whatever re-enables it) and run again\n' "$address" "$address"
      return 0
    fi
  fi
  if [ -n "$minor" ] && fuser -s "$root/dev/nvidia$minor" 2>/dev/null; then
    printf 'a process holds /dev/nvidia%s (GPU %s): %s; stop it and run again\n' "$minor" "$address" \
      "$(fuser -v "$root/dev/nvidia$minor" 2>&1 | tr '\n' ' ')"
    return 0
  fi
  while read -r bus_id pid; do
    if [ "$bus_id" = "$address" ]; then
      printf 'process %s computes on GPU %s; stop it and run again\n' "$pid" "$address"
      return 0
    fi
  done < <(nvidia-smi --query-compute-apps=gpu_bus_id,pid --format=csv,noheader 2>/dev/null | smi_rows || true)
}

# rebind FUNCTION DRIVER — move one PCI function to DRIVER ("" = its default driver) through sysfs.
rebind() {
  local function="$1" driver="$2"
  sysfs_write "/sys/bus/pci/devices/$function/driver_override" "$driver"
  if [ -n "$(pci_driver "$function")" ]; then
    sysfs_write "/sys/bus/pci/devices/$function/driver/unbind" "$function"
  fi
  sysfs_write /sys/bus/pci/drivers_probe "$function"
}

# kernel_cmdline — the kernel arguments the boot loader will pass (systemd-boot: /etc/kernel/cmdline; grub: the
# GRUB_CMDLINE_LINUX_DEFAULT line).
kernel_cmdline() {
  if [ "$bootloader" = systemd-boot ]; then
    cat "$root/etc/kernel/cmdline"
  else
    grep -q '^GRUB_CMDLINE_LINUX_DEFAULT="' "$root/etc/default/grub" \
      || refuse "/etc/default/grub has no GRUB_CMDLINE_LINUX_DEFAULT=\"…\" line to edit"
    sed -nE 's/^GRUB_CMDLINE_LINUX_DEFAULT="(.*)"$/\1/p' "$root/etc/default/grub"
  fi
}

# set_kernel_cmdline ARGS — write them where kernel_cmdline read them and refresh the boot loader.
set_kernel_cmdline() {
  if [ "$bootloader" = systemd-boot ]; then
    install_file /etc/kernel/cmdline 0644 < <(printf '%s\n' "$1")
    proxmox-boot-tool refresh
  else
    install_file /etc/default/grub 0644 < <(
      awk -v line="GRUB_CMDLINE_LINUX_DEFAULT=\"$1\"" '/^GRUB_CMDLINE_LINUX_DEFAULT="/ {print line; next} {print}' "$root/etc/default/grub")
    update-grub
  fi
}

bootloader=systemd-boot
original="$state_dir/vfio-original.state"
added_args="$state_dir/vfio-kernel-args.state"

# --- check: putting every function back on its original driver is safe -------------------------------------
if [ -f "$original" ]; then
  while read -r function driver _override; do
    current="$(pci_driver "$function")"
    [ "$current" != "$driver" ] || continue
    if [ "$current" = nvidia ]; then
      problem="$(gpu_release_problem "$function")"
      [ -z "$problem" ] || refuse "$problem"
    fi
    if [ "$current" = vfio-pci ]; then
      while read -r vmid status; do
        [ "$status" != running ] || refuse "VM $vmid is running with ${function%.*} passed through; stop it before tearing down"
      done < <(vms_using_slot "${function%.*}")
    fi
  done <"$original"
fi

# --- act: files and boot configuration ---------------------------------------------------------------------
initramfs_stale=0
remove_file /etc/modprobe.d/gpuhosts-vfio.conf
[ "$file_changed" = 0 ] || initramfs_stale=1
remove_file /etc/modules-load.d/gpuhosts-vfio.conf
[ "$file_changed" = 0 ] || initramfs_stale=1
remove_file /usr/local/lib/gpuhosts/vfio-override.sh
rmdir "$root/usr/local/lib/gpuhosts" 2>/dev/null || true
if [ -d "$state_dir/backup/etc/modprobe.d" ]; then
  for backup in "$state_dir"/backup/etc/modprobe.d/*; do
    [ -f "$backup" ] || continue
    cp -p "$backup" "$root/etc/modprobe.d/${backup##*/}"
    rm -f "$backup"
    note_change "restored /etc/modprobe.d/${backup##*/}"
    initramfs_stale=1
  done
  rm -rf "$state_dir/backup"
fi
if [ "$initramfs_stale" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi

if [ -f "$added_args" ]; then
  current="$(kernel_cmdline)"
  kept=""
  for arg in $current; do
    grep -qxF "$arg" "$added_args" || kept="${kept:+$kept }$arg"
  done
  if [ "$kept" != "$current" ]; then
    set_kernel_cmdline "$kept"
    reboot_required=1
  fi
  rm -f "$added_args"
fi

# --- act: live binding back to the start -------------------------------------------------------------------
if [ -f "$original" ]; then
  while read -r function driver override; do
    if [ "$(pci_driver "$function")" != "$driver" ]; then
      if [ -n "$driver" ]; then
        rebind "$function" "$driver"
      else
        sysfs_write "/sys/bus/pci/devices/$function/driver/unbind" "$function"
      fi
      note_change "returned $function to '${driver:-no driver}'"
    fi
    if [ "$(driver_override "$function")" != "$override" ]; then
      sysfs_write "/sys/bus/pci/devices/$function/driver_override" "$override"
    fi
  done <"$original"
  rm -f "$original"
fi
rmdir "$state_dir" 2>/dev/null || true
finish
