"""The hidden-state check: refuse to train on hidden states that are zero or not finite, layer by layer.

vLLM before #46301 extracted all-zero hidden states from hybrid (Gated DeltaNet) verifiers, silently: the drafter
"trains" and then accepts nothing. A bug that zeroes only some layers (say the Gated DeltaNet ones) or overflows one
to inf/NaN is as silent, so every layer the drafter reads is checked on its own. After the hidden-state server
starts, one short request makes it write the states of one sample (safetensors, under its --hidden-states-path);
this module reads that file and fails when a floating-point tensor in it is entirely zero, holds an inf or a NaN,
or, given the layers the server extracts (--layers), when the slice of any of those layers is.

The layout is the connector's (vLLM 0.26.0 example_hidden_states_connector.py): `hidden_states` is
extract_from_kv_cache's gather of the cache view [num_blocks, num_hidden_states, block_size, hidden_size] by slot,
so [num_tokens, num_hidden_states, hidden_size] (its get_required_kvcache_layout: the states of one token kept
together), one slice per extracted layer in the order launch_vllm.py passes them (the trainer's layer ids, then the
last layer); `token_ids` beside it.

The file is not there when the response arrives. vLLM's ExampleHiddenStatesConnector (vLLM 0.26.0,
vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py) names it in the response's
`kv_transfer_params.hidden_states_path` (request_finished), creates `<file>.lock` and holds an exclusive flock on it
before the response goes out (wait_for_save), and writes the file later from a thread pool, closing the lock's
descriptor only after save_file (_write_tensors). Its own reader, load_hidden_states, takes a shared flock on the
lock file to wait. This module does the same, polled against a deadline, reads the file while holding the lock,
and then removes both as cleanup_hidden_states does. Lock files whose data file is gone and that nobody holds are
swept from the directory (the trainer deletes what it read and leaves the locks).

Like the deploy gate's probe, this file runs verbatim on the node (templates/hidden_state_server/check-hidden-states.py.j2)
with any Python 3: it reads the safetensors format itself (an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw bytes), so it needs no package.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import fcntl
import json
import os
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
CHUNK = 1 << 20
# Per float dtype: the array typecode of its bits, the exponent bits that are all ones for inf and NaN (the
# magnitude bits for F8_E4M3, whose only non-finite value is NaN, S.1111.111), and the bits of the magnitude.
BITS = {"F64": ("Q", 0x7FF0000000000000, 0x7FFFFFFFFFFFFFFF), "F32": ("I", 0x7F800000, 0x7FFFFFFF),
        "F16": ("H", 0x7C00, 0x7FFF), "BF16": ("H", 0x7F80, 0x7FFF), "F8_E4M3": ("B", 0x7F, 0x7F),
        "F8_E5M2": ("B", 0x7C, 0x7F)}
# The tensor vLLM's connector writes the states under.
STATES = "hidden_states"


@dataclass(frozen=True)
class TensorReport:
    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    zero: bool
    nonfinite: bool = False
    # The layer slices of `hidden_states` that are zero or not finite, by layer id (with --layers).
    zero_layers: tuple[int, ...] = ()
    nonfinite_layers: tuple[int, ...] = ()


def _words(dtype: str, raw: bytes) -> array.array:
    typecode, _, _ = BITS[dtype]
    words = array.array(typecode)
    if words.itemsize * 8 != {"Q": 64, "I": 32, "H": 16, "B": 8}[typecode]:
        raise ValueError(f"this Python's array {typecode!r} is not {dtype}'s width")
    words.frombytes(raw)
    if sys.byteorder == "big":
        words.byteswap()  # safetensors is little-endian
    return words


def _judge(dtype: str, words) -> tuple[bool, bool]:
    """(all zero, any inf or NaN) of a run of `dtype` values given as their bits; -0.0 is zero."""
    _, special, magnitude = BITS[dtype]
    zero, nonfinite = True, False
    for word in words:
        if word & magnitude:
            zero = False
            if word & special == special:
                return False, True
    return zero, nonfinite


def read_tensors(path: Path, layers: tuple[int, ...] = ()) -> list[TensorReport]:
    """Every floating-point tensor of a safetensors file, whether it is all zero or holds an inf or a NaN, and, given
    the extracted layers, which of `hidden_states`' layer slices are."""
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
            dtype, shape = info["dtype"], tuple(info.get("shape", ()))
            begin, end = info["data_offsets"]
            handle.seek(base + begin)
            data = handle.read(end - begin)
            if len(data) != end - begin:
                raise ValueError(f"{path}: tensor {name} is cut short")
            zero, nonfinite = _judge(dtype, _words(dtype, data))
            zero_layers, nonfinite_layers = (), ()
            if layers and name == STATES:
                zero_layers, nonfinite_layers = _layer_slices(path, dtype, shape, data, layers)
            reports.append(TensorReport(str(path), name, dtype, shape, zero, nonfinite, zero_layers, nonfinite_layers))
        return reports


def _layer_slices(path: Path, dtype: str, shape: tuple[int, ...], data: bytes,
                  layers: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The layers whose slice [:, j, :] of a [num_tokens, num_hidden_states, hidden_size] tensor is all zero, and
    those holding an inf or a NaN."""
    if len(shape) != 3 or shape[1] != len(layers):
        raise ValueError(f"{path}: {STATES} is {list(shape)}, not [tokens, {len(layers)} layers, hidden] for the "
                         f"{len(layers)} layers the server extracts ({', '.join(map(str, layers))})")
    tokens, count, hidden = shape
    words = _words(dtype, data)
    zero, nonfinite = [], []
    for j, layer in enumerate(layers):
        verdicts = [_judge(dtype, words[(t * count + j) * hidden:(t * count + j + 1) * hidden]) for t in range(tokens)]
        if all(z for z, _ in verdicts):
            zero.append(layer)
        if any(n for _, n in verdicts):
            nonfinite.append(layer)
    return tuple(zero), tuple(nonfinite)


def check(paths: list[Path], layers: tuple[int, ...] = ()) -> tuple[list[TensorReport], list[str]]:
    """The tensors read, and why training must not start (empty when it may). `layers`: the layer ids the server
    extracts, in its order; each one's slice of `hidden_states` is judged on its own."""
    reports: list[TensorReport] = []
    problems: list[str] = []
    for path in paths:
        found = read_tensors(path, layers)
        if not found:
            problems.append(f"{path}: no floating-point tensor in it")
        elif layers and not any(r.name == STATES for r in found):
            problems.append(f"{path}: no {STATES} tensor, which the server writes the extracted layers under")
        reports += found
    for report in reports:
        where = f"{report.file}: {report.name} {list(report.shape)} ({report.dtype})"
        if report.zero:
            problems.append(f"{where} is all zeros — the server extracts no hidden states from this verifier (vLLM "
                            "without #46301?)")
            continue
        for layer in report.zero_layers:
            problems.append(f"{where}: layer {layer} is all zeros — the server extracts nothing from that layer "
                            "(a Gated DeltaNet layer of a hybrid verifier, with a vLLM that zeroes them?)")
        if report.nonfinite:
            layers_named = ", ".join(map(str, report.nonfinite_layers))
            problems.append(f"{where} holds inf or NaN" + (f" in layer(s) {layers_named}" if layers_named else "")
                            + " — the verifier's states overflow (its dtype, or a broken checkpoint)")
    if not paths:
        problems.append("no hidden-state file to check")
    return reports, problems


def hidden_states_path(response: dict) -> str:
    """The file a completion response names (vLLM's CompletionResponse.kv_transfer_params)."""
    params = response.get("kv_transfer_params") or {}
    path = params.get("hidden_states_path")
    if not isinstance(path, str) or not path:
        raise ValueError("the response has no kv_transfer_params.hidden_states_path: the server is not a "
                         "hidden-state server (launch_vllm.py with the ExampleHiddenStatesConnector)")
    return path


@contextlib.contextmanager
def written(path: Path, timeout_s: float, *, clock=time.monotonic, pause=time.sleep, poll_s: float = 0.2):
    """Hold a shared flock on `<path>.lock` once vLLM's writer has released its exclusive one (see the module's
    docstring), waiting at most `timeout_s`; the file is complete while the caller reads it here."""
    lock = Path(str(path) + ".lock")
    deadline = clock() + timeout_s
    while True:
        try:
            fd = os.open(lock, os.O_RDONLY)
            break
        except FileNotFoundError:
            # No lock file: a server without use_synchronization_lock, or one already cleaned up; the file itself
            # must then be there (read_tensors refuses one cut short).
            if path.exists():
                yield
                return
            if clock() >= deadline:
                raise TimeoutError(f"{path}: neither the file nor its .lock appeared within {timeout_s:g} s")
            pause(poll_s)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() >= deadline:
                    raise TimeoutError(f"{path}: the server still writes it after {timeout_s:g} s (its .lock is held)")
                pause(poll_s)
        yield
    finally:
        os.close(fd)


def remove_states(path: Path) -> None:
    """vLLM's cleanup_hidden_states: the lock file, then the file."""
    for victim in (Path(str(path) + ".lock"), path):
        with contextlib.suppress(FileNotFoundError):
            victim.unlink()


def sweep_locks(directory: Path) -> int:
    """Remove `<file>.safetensors.lock` files whose file is gone and whose lock nobody holds; how many."""
    removed = 0
    for lock in sorted(directory.glob("**/*.safetensors.lock")):
        if Path(str(lock)[: -len(".lock")]).exists():
            continue  # a reader may still open it
        try:
            # Read-write: on NFS an exclusive flock needs a descriptor open for writing (speculators' NFS flock
            # hotfix, v0.7.0.1 src/speculators/data_generation/vllm_client.py wait_for_lock).
            fd = os.open(lock, os.O_RDWR)
        except (FileNotFoundError, PermissionError):
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a writer holds it
        finally:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
            removed += 1
    return removed


def confined(named: str, root: str, states_dir: str) -> Path:
    """The file a response names, as long as it is a .safetensors file inside the server's own folder: whoever
    answers on the server's port chooses the name, and this check runs as root and removes the file."""
    folder = Path(os.path.realpath(root + states_dir))
    path = Path(root + named)
    resolved = Path(os.path.realpath(path))
    if path.is_symlink() or resolved.suffix != ".safetensors" or folder not in resolved.parents:
        raise ValueError(f"the response names {named!r}, not a .safetensors file inside the server's "
                         f"--hidden-states-path {states_dir}: nothing of it is read or removed")
    return resolved


def check_response(response_file: Path, root: str, timeout_s: float, layers: tuple[int, ...] = (),
                   states_dir: str = "") -> tuple[list[TensorReport], list[str]]:
    """Read the file a probe's response names (under `root`, the node's file system) once written, and remove it;
    only a file inside `states_dir`, the server's own folder."""
    path = confined(hidden_states_path(json.loads(response_file.read_text())), root, states_dir)
    try:
        with written(path, timeout_s):
            return check([path], layers)
    finally:
        remove_states(path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check-hidden-states.py")
    parser.add_argument("files", nargs="*", type=Path, help="safetensors files to check as they are")
    parser.add_argument("--response", type=Path, help="a completion response naming the file the server writes")
    parser.add_argument("--root", default="", help="where the node's file system is mounted (tests)")
    parser.add_argument("--states-dir", help="the server's --hidden-states-path: a response may name "
                                                          "only a file inside it")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server's writer")
    parser.add_argument("--sweep", type=Path, help="directory whose stale .safetensors.lock files to remove")
    parser.add_argument("--layers", default="", help="the layer ids the server extracts, in its order "
                                                     "(comma-separated): each layer's slice is checked")
    args = parser.parse_args(argv)
    try:
        layers = tuple(int(word) for word in args.layers.split(",") if word.strip())
    except ValueError:
        parser.error(f"--layers {args.layers!r}: give comma-separated layer ids, e.g. 2,17,32,47,62,64")
    if args.sweep is not None and args.sweep.is_dir():
        swept = sweep_locks(args.sweep)
        if swept:
            print(f"hidden-state check: removed {swept} stale lock file(s) under {args.sweep}")
    if args.response is not None and not args.states_dir:
        parser.error("--response needs --states-dir, the server's --hidden-states-path")
    try:
        if args.response is not None:
            reports, problems = check_response(args.response, args.root, args.timeout, layers, args.states_dir)
        else:
            reports, problems = check(args.files, layers)
    except (OSError, ValueError, TimeoutError) as error:
        print(f"hidden-state check: cannot read: {error}")
        return 2
    for report in reports:
        verdict = ("ALL ZERO" if report.zero else "NOT FINITE" if report.nonfinite else
                   f"layer(s) {', '.join(map(str, report.zero_layers))} ALL ZERO" if report.zero_layers else
                   f"non-zero and finite in each of layers {', '.join(map(str, layers))}"
                   if layers and report.name == STATES else "non-zero and finite")
        print(f"hidden-state check: {report.name} {list(report.shape)} {report.dtype}: {verdict}")
    for problem in problems:
        print(f"hidden-state check: refused: {problem}")
    print("hidden-state check: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
