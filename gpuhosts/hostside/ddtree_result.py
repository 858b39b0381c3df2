"""The DDTree reference run's figures, read from the file its benchmark.py saves, with the standard library only.

liranringel/ddtree benchmark.py (c96427a185677bf4133ed865dd1626a5041aef9b, `main`) prints no figure: it
`torch.save`s `run_data = {"responses": [...], "block_size", "draft_attn_implementation",
"target_attn_implementation", "args": vars(args)}`, one response per turn mapping "baseline", "dflash" and
"ddtree_tb<budget>" to the SimpleNamespace that dflash.py `dflash_generate` / ddtree.py `ddtree_generate` return.
The authors' own figures come from make_latex_table.py; `summarise` computes them the same way.

The file is torch's zip format (torch/serialization.py `_save` @ v2.11.0): `<archive>/data.pkl` is a protocol-2
pickle whose tensors are `torch._utils._rebuild_tensor_v2(<persistent id ("storage", torch.<T>Storage, key,
location, numel)>, offset, size, stride, requires_grad, OrderedDict())` and whose storages lie in
`<archive>/data/<key>` (`_load`, `persistent_load`). It is read here through an unpickler that knows only what
run_data holds and refuses every other global by name, so a crafted file cannot run code: a tensor becomes a
`TensorStub` with its shape and dtype, never its data.
"""

from __future__ import annotations

import collections
import io
import json
import math
import pickle
import sys
import types
import zipfile
from dataclasses import dataclass

RESULT_PREFIX = "GPUHOSTS_DDTREE "
BASELINE = "baseline"
DFLASH = "dflash"
DDTREE_PREFIX = "ddtree_tb"

# torch/storage.py `_dtype_to_storage_type_map` @ v2.11.0: the legacy storage class each dtype pickles as, with the
# element size that `persistent_load` multiplies numel by (torch._utils._element_size).
STORAGE_DTYPES = {
    "DoubleStorage": ("float64", 8), "FloatStorage": ("float32", 4), "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2), "LongStorage": ("int64", 8), "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2), "CharStorage": ("int8", 1), "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1), "ComplexDoubleStorage": ("complex128", 16), "ComplexFloatStorage": ("complex64", 8),
}


class ResultError(Exception):
    """A run file that cannot be read or does not hold what benchmark.py saves."""


@dataclass(frozen=True)
class StorageRef:
    dtype: str
    key: str
    location: str
    numel: int
    element_size: int


@dataclass(frozen=True)
class TensorStub:
    """What a saved tensor is here: its shape and dtype (output_ids are only counted, never decoded)."""

    shape: tuple[int, ...]
    dtype: str
    storage: StorageRef
    offset: int


@dataclass(frozen=True)
class _StorageClass:
    name: str


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    if not isinstance(storage, StorageRef):
        raise ResultError(f"a tensor's storage is {type(storage).__name__}, not a saved storage")
    if not isinstance(size, tuple) or not all(isinstance(n, int) and n >= 0 for n in size):
        raise ResultError(f"a tensor's size {size!r} is not a tuple of sizes")
    return TensorStub(shape=size, dtype=storage.dtype, storage=storage, offset=int(storage_offset))


# Everything run_data's pickle names: SimpleNamespace (the responses), the tensor rebuild function and its empty
# OrderedDict of hooks (torch/_tensor.py `_reduce_ex_internal` @ v2.11.0), and builtin sets should an args value
# ever be one. Storage classes are answered by `find_class` below.
ALLOWED_GLOBALS = {
    ("types", "SimpleNamespace"): types.SimpleNamespace,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler for run_data: allowed globals only, storages as references into the archive."""

    def __init__(self, file, storage_records: set[str]):
        super().__init__(file)
        self.storage_records = storage_records

    def find_class(self, module: str, name: str):
        found = ALLOWED_GLOBALS.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageClass(name)
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a DDTree run file holds no such object")

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage":
            raise pickle.UnpicklingError(f"refused persistent id {pid!r}: not a torch storage")
        _, storage_class, key, location, numel = pid
        if not isinstance(storage_class, _StorageClass) or not isinstance(key, str) or not isinstance(numel, int):
            raise pickle.UnpicklingError(f"refused persistent id {pid!r}: not a torch storage")
        if key not in self.storage_records:
            raise pickle.UnpicklingError(f"storage {key} is not in the archive (a cut-off file?)")
        dtype, size = STORAGE_DTYPES[storage_class.name]
        return StorageRef(dtype=dtype, key=key, location=str(location), numel=numel, element_size=size)


def load_run(path: str) -> dict:
    """run_data from a file torch.save wrote; ResultError (naming what is wrong) for anything else."""
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ResultError("no such file") from None
    except (zipfile.BadZipFile, OSError) as error:
        raise ResultError(f"not a torch.save archive ({error})") from None
    with archive:
        names = archive.namelist()
        pickles = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ResultError(f"not a torch.save archive: {len(pickles)} <archive>/data.pkl records")
        prefix = pickles[0][: -len("data.pkl")]
        sizes = {n[len(prefix) + len("data/"):]: archive.getinfo(n).file_size
                 for n in names if n.startswith(prefix + "data/")}
        try:
            data = archive.read(pickles[0])
            run_data = RestrictedUnpickler(io.BytesIO(data), set(sizes)).load()
        except (pickle.UnpicklingError, ResultError) as error:
            raise ResultError(str(error)) from None
        except (zipfile.BadZipFile, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
                OSError) as error:
            raise ResultError(f"data.pkl is damaged ({type(error).__name__}: {error})") from None
    _check_storages(run_data, sizes)
    if not isinstance(run_data, dict):
        raise ResultError(f"holds a {type(run_data).__name__}, not benchmark.py's run_data dict")
    return run_data


def _check_storages(value, sizes: dict[str, int]) -> None:
    """Every tensor's storage record holds as many bytes as its pickle says (a truncated write does not)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, TensorStub):
            ref = item.storage
            if sizes.get(ref.key) != ref.numel * ref.element_size:
                raise ResultError(f"storage {ref.key} holds {sizes.get(ref.key)} bytes, not "
                                  f"{ref.numel * ref.element_size}")
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, types.SimpleNamespace):
            stack.extend(vars(item).values())


def _pairwise_sum(values: list[float]) -> float:
    """numpy's float64 sum of `values`, bit for bit: numpy/_core/src/umath/loops_utils.h.src `pairwise_sum`
    (@ v2.3.5, the numpy of the SGLang 0.5.11 lock): a plain loop below 8 items, eight accumulators up to 128,
    halves (a multiple of 8) above."""
    n = len(values)
    if n < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    if n <= 128:
        r = list(values[:8])
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in values[i:]:
            total += v
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values[:half]) + _pairwise_sum(values[half:])


def np_mean(values: list, what: str) -> float:
    """`float(np.mean(values))` for a list of numbers: numpy's add.reduce from 0.0 over float64, then divided by
    the count (numpy/_core/_methods.py `_mean`)."""
    if not values:
        raise ResultError(f"{what} is empty; numpy's mean of it is nan")
    floats = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ResultError(f"{what} holds {v!r}, not a number")
        floats.append(float(v))
    return _pairwise_sum(floats) / len(floats)


def _field(response: object, method: str, name: str, turn: int):
    if not isinstance(response, types.SimpleNamespace) or not hasattr(response, name):
        raise ResultError(f"responses[{turn}][{method!r}] has no {name} (not what dflash_generate returns)")
    return getattr(response, name)


def mean_acceptance_length(responses: list[dict], method: str) -> float:
    """make_latex_table.py `mean_acceptance_length`: the mean over turns of each turn's mean acceptance length."""
    return np_mean([np_mean(_field(r[method], method, "acceptance_lengths", i), f"responses[{i}][{method!r}]"
                            ".acceptance_lengths") for i, r in enumerate(responses)], f"{method} acceptance lengths")


def mean_time_per_token(responses: list[dict], method: str) -> float:
    """make_latex_table.py `mean_time_per_token`: the mean over turns of time_per_output_token (seconds)."""
    return np_mean([_field(r[method], method, "time_per_output_token", i) for i, r in enumerate(responses)],
                   f"{method} times per output token")


def _budget(method: str) -> int:
    text = method[len(DDTREE_PREFIX):]
    if not text.isdigit():
        raise ResultError(f"method {method!r} does not end in a tree budget")
    return int(text)


def answered(run_data: dict, args: dict) -> dict:
    """What the run answered, in the terms of the bake-off table (gpuhosts/hostside/bench_probe.py `describe`).
    benchmark.py with stacks/patches/ddtree-gdn-hybrid.patch part (d) saves `--prompts`, the prompts' names
    (run_data "prompts") and `--thinking`; the upstream benchmark.py saves none of them and applies the chat
    template with enable_thinking=False (benchmark.py `main` at c96427a)."""
    thinking = args.get("thinking")
    if thinking not in (None, "on", "off"):
        raise ResultError(f"args.thinking is {thinking!r}, not on or off")
    mode = thinking == "on"
    if args.get("prompts") is not None:
        names = run_data.get("prompts")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ResultError("the run answered --prompts but run_data names no prompts")
        return {"prompts": names, "thinking": mode}
    return {"dataset": args.get("dataset"), "samples": args.get("max_samples"), "thinking": mode}


def summarise(run_data: dict) -> dict:
    """The figures of one run as make_latex_table.py derives them from an sdpa run (the only kind the reference
    runs: DDTree needs the sdpa target), with the speedup of each method over the run's own baseline."""
    responses = run_data.get("responses")
    if not isinstance(responses, list) or not responses:
        raise ResultError("run_data has no responses (no turn was run)")
    for i, response in enumerate(responses):
        if not isinstance(response, dict):
            raise ResultError(f"responses[{i}] is a {type(response).__name__}, not a dict of methods")
    methods = list(responses[0])
    if BASELINE not in methods:
        raise ResultError("responses[0] has no baseline; speedups are over it")
    for i, response in enumerate(responses):
        if list(response) != methods:
            raise ResultError(f"responses[{i}] has the methods {list(response)}, not {methods}")
    baseline_time = mean_time_per_token(responses, BASELINE)
    figures = {}
    for method in methods:
        time = mean_time_per_token(responses, method)
        if time <= 0 or not math.isfinite(time):
            raise ResultError(f"{method}'s mean time per output token is {time}")
        figures[method] = {"acceptanceLength": mean_acceptance_length(responses, method),
                           "timePerOutputTokenS": time, "speedup": baseline_time / time}
    ddtree_methods = [m for m in methods if m.startswith(DDTREE_PREFIX)]
    ddtree = None
    if ddtree_methods:
        # make_latex_table.py `build_rows`: max() over the methods in the order the first response lists them,
        # so a tie goes to the first.
        best = max(ddtree_methods, key=lambda m: baseline_time / figures[m]["timePerOutputTokenS"])
        ddtree = {"method": best, "bestBudget": _budget(best), "acceptanceLength": figures[best]["acceptanceLength"],
                  "speedup": figures[best]["speedup"]}
    dflash = None
    if DFLASH in figures:
        dflash = {"acceptanceLength": figures[DFLASH]["acceptanceLength"], "speedup": figures[DFLASH]["speedup"]}
    args = run_data.get("args")
    if not isinstance(args, dict):
        raise ResultError("run_data has no args (vars(args) of benchmark.py)")
    budgets = args.get("tree_budget")
    return {
        "turns": len(responses),
        "methods": figures,
        "dflash": dflash,
        "ddtree": ddtree,
        "answered": answered(run_data, args),
        "blockSize": run_data.get("block_size"),
        "draftAttnImplementation": run_data.get("draft_attn_implementation"),
        "targetAttnImplementation": run_data.get("target_attn_implementation"),
        "args": {
            "dataset": args.get("dataset"),
            "maxSamples": args.get("max_samples"),
            "maxNewTokens": args.get("max_new_tokens"),
            "treeBudgets": [int(b) for b in budgets.split(",")] if isinstance(budgets, str) else budgets,
            "temperature": args.get("temperature"),
        },
    }


def result_line(summary: dict) -> str:
    return RESULT_PREFIX + json.dumps(summary, sort_keys=True, allow_nan=False)


def main(argv: list[str]) -> int:
    """`ddtree-result.py RUN.pt`: one line `GPUHOSTS_DDTREE <json>`; status 1 with the reason when the file
    cannot give the figures, 2 on a wrong call."""
    if len(argv) != 1:
        print("usage: ddtree-result.py RUN.pt", file=sys.stderr)
        return 2
    path = argv[0]
    try:
        line = result_line(summarise(load_run(path)))
    except ResultError as error:
        print(f"ddtree-result: {path}: {error}", file=sys.stderr)
        return 1
    print(line)
    return 0
