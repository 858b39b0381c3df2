# managed by gpuhosts — unit hidden-state-server; generated from templates/, do not edit on the host.
set -euo pipefail
umask 022
# Empty on a real host; the simulated host of the tests points it at its tree (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
unit=hidden-state-server
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
# The hidden-state server on GPUs [0, 1, 2, 3].
unit_name=gpuhosts-hidden-state-server.service
restart=0
[ -e "$root"/opt/gpuhosts/speculators/src/scripts/launch_vllm.py ] || refuse "/opt/gpuhosts/speculators/src/scripts/launch_vllm.py is missing; the step that provides it comes first"
[ -e "$root"/data/models/Qwen/Qwen3.6-27B/.gpuhosts-download ] || refuse "/data/models/Qwen/Qwen3.6-27B/.gpuhosts-download is missing; the step that provides it comes first"
install_file /etc/systemd/system/gpuhosts-hidden-state-server.service 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — the hidden-state server of the DFlash training: vLLM 0.26.0 via speculators'
# launch_vllm.py on GPUs 0,1,2,3, extracting layers [2, 17, 32, 47, 62, 64] of Qwen/Qwen3.6-27B.
[Unit]
Description=gpuhosts hidden-state server (Qwen/Qwen3.6-27B, GPUs 0,1,2,3)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
WorkingDirectory=/opt/gpuhosts/speculators/src
Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID
Environment=CUDA_VISIBLE_DEVICES=0,1,2,3
Environment=HF_HUB_OFFLINE=1
Environment=PATH=/opt/gpuhosts/vllm/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=/opt/gpuhosts/vllm/venv/bin/python /opt/gpuhosts/speculators/src/scripts/launch_vllm.py /data/models/Qwen/Qwen3.6-27B \
    --hidden-states-path /data/hidden_states \
    --target-layer-ids 2 17 32 47 62 \
    -- \
    --host 127.0.0.1 \
    --port 8000 \
    --tensor-parallel-size 4 \
    --gpu-memory-utilization 0.85 \
    --max-model-len 8192
Restart=on-failure
RestartSec=30
# Loading 55 GB of weights on four GPUs takes minutes; the pre-flight step polls /health for readiness.
TimeoutStartSec=1800
TimeoutStopSec=120
KillMode=control-group
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /usr/local/lib/gpuhosts/check-hidden-states.py 0755 <<'GPUHOSTS_EOF'
#!/usr/bin/env python3
# managed by gpuhosts — the hidden-state check of the training node: /usr/local/lib/gpuhosts/check-hidden-states.py FILE.safetensors…
# It is components/hidden_state_check.py verbatim (standard library only).
"""The hidden-state check: refuse to train on hidden states that are all zero.

vLLM before #46301 extracted all-zero hidden states from hybrid (Gated DeltaNet) verifiers, silently: the drafter
"trains" and then accepts nothing. After the hidden-state server starts, one short request makes it write the
states of one sample (safetensors, under its --hidden-states-path); this module reads those files and fails when a
floating-point tensor in them is entirely zero.

Like the deploy gate's probe, this file runs verbatim on the node (templates/training_node/check-hidden-states.py.j2)
with any Python 3: it reads the safetensors format itself (an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw bytes), so it needs no package.
"""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
CHUNK = 1 << 20


@dataclass(frozen=True)
class TensorReport:
    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    zero: bool


def read_tensors(path: Path) -> list[TensorReport]:
    """Every floating-point tensor of a safetensors file, and whether all its bytes are zero."""
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
        (length,) = struct.unpack("<Q", raw)
        if length > 100_000_000:
            raise ValueError(f"{path}: not a safetensors file (header of {length} bytes)")
        header = json.loads(handle.read(length))
        base = 8 + length
        end_of_data = max((info["data_offsets"][1] for name, info in header.items() if name != "__metadata__"), default=0)
        if path.stat().st_size < base + end_of_data:
            raise ValueError(f"{path}: cut short ({path.stat().st_size} of {base + end_of_data} bytes)")
        reports = []
        for name, info in sorted(header.items()):
            if name == "__metadata__" or info.get("dtype") not in FLOAT_DTYPES:
                continue
            begin, end = info["data_offsets"]
            handle.seek(base + begin)
            remaining, zero = end - begin, True
            while remaining > 0 and zero:
                block = handle.read(min(CHUNK, remaining))
                if not block:
                    raise ValueError(f"{path}: tensor {name} is cut short")
                zero = not any(block)
                remaining -= len(block)
            reports.append(TensorReport(str(path), name, info["dtype"], tuple(info.get("shape", ())), zero))
        return reports


def check(paths: list[Path]) -> tuple[list[TensorReport], list[str]]:
    """The tensors read, and why training must not start (empty when it may)."""
    reports: list[TensorReport] = []
    problems: list[str] = []
    for path in paths:
        found = read_tensors(path)
        if not found:
            problems.append(f"{path}: no floating-point tensor in it")
        reports += found
    for report in reports:
        if report.zero:
            problems.append(f"{report.file}: {report.name} {list(report.shape)} ({report.dtype}) is all zeros — the "
                            "server extracts no hidden states from this verifier (vLLM without #46301?)")
    if not paths:
        problems.append("no hidden-state file to check")
    return reports, problems


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv]
    try:
        reports, problems = check(paths)
    except (OSError, ValueError) as error:
        print(f"hidden-state check: cannot read: {error}")
        return 2
    for report in reports:
        print(f"hidden-state check: {report.name} {list(report.shape)} {report.dtype}: "
              f"{'ALL ZERO' if report.zero else 'non-zero'}")
    for problem in problems:
        print(f"hidden-state check: refused: {problem}")
    print("hidden-state check: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
[ "$restart" = 0 ] || systemctl daemon-reload
if ! systemctl is-enabled --quiet "$unit_name"; then
  systemctl enable --quiet "$unit_name"
  note_change "enabled $unit_name"
fi
if ! systemctl is-active --quiet "$unit_name"; then
  systemctl start "$unit_name"
  note_change "started $unit_name"
elif [ "$restart" = 1 ]; then
  systemctl restart "$unit_name"
  note_change "restarted $unit_name with its new settings"
fi
systemctl is-active --quiet "$unit_name" || refuse "$unit_name did not start; see journalctl -u $unit_name"
say "$unit_name is running"
finish
