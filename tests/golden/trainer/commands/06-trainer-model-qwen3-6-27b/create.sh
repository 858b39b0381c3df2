# managed by gpuhosts — unit model-qwen3-6-27b; generated from templates/, do not edit on the host.
set -euo pipefail
umask 022
# Empty on a real host; the simulated host of the tests points it at its tree (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
unit=model-qwen3-6-27b
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
# On the node: Qwen/Qwen3.6-27B@main in /data/models/Qwen/Qwen3.6-27B.
repo=Qwen/Qwen3.6-27B
revision=main
local_dir=/data/models/Qwen/Qwen3.6-27B
hf=/opt/gpuhosts/speculators/venv/bin/hf
python=/opt/gpuhosts/speculators/venv/bin/python
marker="$root$local_dir/.gpuhosts-download"

if [ "$(cat "$marker" 2>/dev/null)" = "$repo@$revision" ]; then
  say "$repo@$revision is complete in $local_dir"
else
  [ -x "$root$hf" ] || refuse "$hf is missing; the service's Python environment provides it"
  unset HF_TOKEN
  mkdir -p "$root$local_dir"
  rm -f "$marker"
  say "downloading $repo@$revision into $local_dir (finished files are kept; a new run resumes)"
  if ! HF_HUB_DISABLE_PROGRESS_BARS=1 "$root$hf" download "$repo" --revision "$revision" --local-dir "$root$local_dir"; then
    refuse "the download of $repo@$revision stopped; run again to resume it (files already fetched are kept)"
  fi
  printf '%s\n' "$repo@$revision" >"$marker"
  note_change "downloaded $repo@$revision into $local_dir"
fi

# --- verify what was downloaded against what the plan derived from it --------------------------------------
if ! problems="$("$root$python" - "$root$local_dir/config.json" <<'GPUHOSTS_CHECK'
import json, sys
expected = json.loads('{"num_layers": 64}')
config = json.load(open(sys.argv[1]))
text = config.get("text_config") or {}
problems = []
if "num_layers" in expected:
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    if layers != expected["num_layers"]:
        problems.append(f"num_hidden_layers is {layers}, the plan derived the drafter's layer ids for {expected['num_layers']}")
if "target_layer_ids" in expected:
    ids = (config.get("dflash_config") or {}).get("target_layer_ids", config.get("target_layer_ids"))
    if ids is not None and list(ids) != expected["target_layer_ids"]:
        problems.append(f"dflash_config.target_layer_ids {ids} differ from {expected['target_layer_ids']} derived "
                        "from the target; a drafter conditioned on other layers accepts almost nothing")
if "sliding_window" in expected:
    sliding = "sliding_attention" in (config.get("layer_types") or [])
    if sliding != expected["sliding_window"]:
        problems.append(f"the drafter {'has' if sliding else 'has no'} sliding-window layers, the plan assumed the "
                        "opposite; set speculative.drafter.slidingWindow to match")
print("; ".join(problems))
sys.exit(1 if problems else 0)
GPUHOSTS_CHECK
)"; then
  refuse "$local_dir/config.json: ${problems:-could not be read}"
fi
say "$local_dir/config.json agrees with the plan"
finish
