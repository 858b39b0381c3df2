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
