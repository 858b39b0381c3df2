# managed by gpuhosts — unit env-monitor; generated from templates/, do not edit on the host.
set -euo pipefail
umask 022
# Empty on a real host; the simulated host of the tests points it at its tree (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
unit=env-monitor
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
# On the node: the uv environment monitor with flask==3.1.3.
uv_version=0.13.9
python_version=3.12
venv=/opt/gpuhosts/monitor/venv
requirement=flask==3.1.3
package=flask
release=3.1.3
from_git=false
uv_home="$root/opt/gpuhosts/.uv"
uv="$uv_home/bin/uv"
marker="$root$venv/.gpuhosts-requirement"

# The engine's installed version, empty when it is not installed (or there is no environment yet).
installed_version() {
  { "$uv" pip show --python "$root$venv/bin/python" "$package" 2>/dev/null || true; } | sed -n 's/^Version: //p'
}

# --- uv itself, pinned, in a small venv of its own (the container's python3 only bootstraps it) ------------
if [ "$("$uv" --version 2>/dev/null)" != "uv $uv_version" ]; then
  [ -x "$root/usr/bin/python3" ] || refuse "the node has no /usr/bin/python3; install it (apt-get install python3 python3-venv)"
  if ! "$root/usr/bin/python3" -c 'import ensurepip' 2>/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv
  fi
  [ -x "$uv_home/bin/python" ] || "$root/usr/bin/python3" -m venv "$uv_home"
  "$uv_home/bin/python" -m pip install --quiet "uv==$uv_version"
  [ "$("$uv" --version 2>/dev/null)" = "uv $uv_version" ] || refuse "uv $uv_version did not install into $uv_home"
  note_change "installed uv $uv_version"
fi

# --- the engine's environment ----------------------------------------------------------------------------
if [ ! -x "$root$venv/bin/python" ]; then
  "$uv" venv --python "$python_version" "$root$venv"
  note_change "created $venv (Python $python_version)"
fi
installed="$(installed_version)"
wanted_build=0
[ "$(cat "$marker" 2>/dev/null)" = "$requirement" ] || wanted_build=1
[ -n "$installed" ] || wanted_build=1
if [ "$from_git" = false ] && [ "$installed" != "$release" ]; then
  wanted_build=1
fi
if [ "$wanted_build" = 1 ]; then
  say "installing $requirement (was: ${installed:-none})"
  # The marker goes first: a cut-off install must not look complete on the next run.
  rm -f "$marker"
  "$uv" pip install --python "$root$venv/bin/python" "$requirement"
  printf '%s\n' "$requirement" >"$marker"
  note_change "installed $requirement into $venv"
fi

# --- verify ----------------------------------------------------------------------------------------------
installed="$(installed_version)"
[ -n "$installed" ] || refuse "$package is not installed in $venv after installing $requirement"
if [ "$from_git" = false ] && [ "$installed" != "$release" ]; then
  refuse "$venv has $package $installed, not $release"
fi
say "$venv: $package $installed"
finish
