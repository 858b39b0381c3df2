# managed by gpuhosts — unit nvidia-driver; generated from templates/, do not edit on the host.
set -euo pipefail
umask 022
# Empty on a real host; the simulated host of the tests points it at its tree (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
unit=nvidia-driver
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

version=580.126.09
module_type=open
run_file=NVIDIA-Linux-x86_64-580.126.09.run
url=https://download.nvidia.com/XFree86/Linux-x86_64/580.126.09/NVIDIA-Linux-x86_64-580.126.09.run
sha256=5d3fbb2b2a2bd9b3d0a6c3a9b1bd8e1f8b7ad0b7e0b1c3f6f1f1c8d5a9e6b7c4
cache="$root/var/cache/gpuhosts"
state="$state_dir/nvidia-driver.state"

gpus=(0000:41:00.0 0000:61:00.0)
loaded="$(module_version)"
installed="$(userspace_version)"
say "wanted $version ($module_type); loaded module: ${loaded:-none}; installed user space: ${installed:-none}"

if [ "$installed" != "$version" ] && [ -n "$loaded" ] && [ "$loaded" != "$version" ]; then
  # The installer will not replace a loaded module. Unloading works only while nothing but our own persistence
  # daemon uses a GPU; that one is stopped first and started again if the upgrade has to wait.
  persistenced_was_active=0
  if systemctl is-active --quiet gpuhosts-nvidia-persistenced.service; then
    persistenced_was_active=1
    systemctl stop gpuhosts-nvidia-persistenced.service
  fi
  for node in "$root"/dev/nvidia[0-9]* "$root/dev/nvidiactl" "$root/dev/nvidia-uvm"; do
    if [ -e "$node" ] && fuser -s "$node" 2>/dev/null; then
      [ "$persistenced_was_active" = 0 ] || systemctl start gpuhosts-nvidia-persistenced.service
      refuse "nvidia $loaded is loaded and in use (${node#"$root"}: $(fuser -v "$node" 2>&1 | tail -n +2 | tr -s ' \n' ' ')), \
so $version cannot replace it now: stop the containers and processes using the GPUs, or reboot, and run again"
    fi
  done
  for module in nvidia_uvm nvidia_drm nvidia_modeset nvidia; do
    if [ -d "$root/sys/module/$module" ] && ! modprobe -r "$module"; then
      [ "$persistenced_was_active" = 0 ] || systemctl start gpuhosts-nvidia-persistenced.service
      refuse "nvidia $loaded is loaded and in use ($module), so $version cannot replace it now: stop what uses the \
GPUs (fuser -v /dev/nvidia*), or reboot, and run again"
    fi
  done
  note_change "unloaded nvidia $loaded"
fi

# nouveau first: while it holds a GPU the installer cannot load its module.
initramfs_stale=0
if owed initramfs; then
  initramfs_stale=1
fi
owe initramfs
install_file /etc/modprobe.d/gpuhosts-nouveau.conf 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — nouveau would claim the GPUs before the NVIDIA driver.
blacklist nouveau
options nouveau modeset=0
GPUHOSTS_EOF
if [ "$initramfs_stale" = 1 ] || [ "$file_changed" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi
settled initramfs
if [ -d "$root/sys/module/nouveau" ] && ! modprobe -r nouveau; then
  say "nouveau is loaded and in use; the driver installs after a reboot"
  reboot_required=1
  finish
  exit 0
fi

if [ "$installed" != "$version" ]; then
  kernel="$(uname -r)"
  missing=()
  # dkms first: the .run registers its module with DKMS only when DKMS is already there.
  for pkg in dkms "proxmox-headers-$kernel" proxmox-default-headers; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  mkdir -p "$state_dir" "$cache"
  if [ "${#missing[@]}" -gt 0 ]; then
    # Recorded first: a run cut off during apt-get must still let teardown remove them.
    printf 'installed_packages=%s\n' "${missing[*]}" >>"$state"
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    note_change "installed ${missing[*]}"
  fi

  if [ ! -f "$cache/$run_file" ] || ! printf '%s  %s\n' "$sha256" "$cache/$run_file" | sha256sum --check --status; then
    curl -fsSL --retry 3 -o "$cache/$run_file.part" "$url"
    if ! printf '%s  %s\n' "$sha256" "$cache/$run_file.part" | sha256sum --check --status; then
      rm -f "$cache/$run_file.part"
      refuse "$url does not have the pinned sha256 $sha256; check gpuhosts:nvidia.sha256"
    fi
    mv -f "$cache/$run_file.part" "$cache/$run_file"
  fi

  if ! grep -q '^previous_userspace=' "$state" 2>/dev/null; then
    printf 'previous_userspace=%s\n' "$installed" >>"$state"
  fi
  sh "$cache/$run_file" --silent --dkms --kernel-module-type="$module_type"
  note_change "installed NVIDIA driver $version ($module_type kernel module, DKMS)"
fi

install_file /etc/systemd/system/gpuhosts-nvidia-persistenced.service 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — the .run installer ships nvidia-persistenced but no enabled unit.
[Unit]
Description=NVIDIA persistence daemon
After=systemd-modules-load.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --persistence-mode
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
TimeoutStartSec=60

[Install]
WantedBy=multi-user.target
GPUHOSTS_EOF
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi
if ! systemctl is-enabled --quiet gpuhosts-nvidia-persistenced.service || ! systemctl is-active --quiet gpuhosts-nvidia-persistenced.service; then
  systemctl enable --now gpuhosts-nvidia-persistenced.service
  note_change "enabled gpuhosts-nvidia-persistenced.service"
fi

installed="$(userspace_version)"
[ "$installed" = "$version" ] || refuse "after installing, user space is ${installed:-absent}, not $version"
loaded="$(module_version)"
if [ "$loaded" != "$version" ]; then
  say "the loaded module is ${loaded:-none}; $version takes over at the next boot"
  reboot_required=1
fi
for address in "${gpus[@]}"; do
  driver="$(pci_driver "$address")"
  if [ "$driver" != nvidia ]; then
    say "GPU $address is on '${driver:-no driver}'; nvidia takes it at the next boot"
    reboot_required=1
  fi
done
finish
