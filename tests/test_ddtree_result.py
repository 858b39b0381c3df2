"""The DDTree run reader on files the real torch wrote (tests/fixtures/ddtree): its figures are make_latex_table's,
its unpickler refuses what run_data never holds, and a damaged or empty run is an error naming the file."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpuhosts.hostside import ddtree_result
from gpuhosts.plans.ddtree_reference import render_ddtree_result_script
from gpuhosts.hostside.ddtree_result import ResultError, load_run, main, summarise

FIXTURES = Path(__file__).parent / "fixtures" / "ddtree"
# name, turns, dataset, temperature, draft attention, budgets
RUNS = [
    ("run-mt-bench-t0", 4, "mt-bench", 0.0, "flash_attention_2", [16, 64, 256]),
    ("run-gsm8k-t1-sdpa-drafter", 10, "gsm8k", 1.0, "sdpa", [16, 64, 256]),
]


def latex_table_figures(run_data: dict, method: str) -> tuple[float, float]:
    """make_latex_table.py `mean_acceptance_length` and `mean_time_per_token` (c96427a), written out here with
    numpy on the loaded responses."""
    responses = run_data["responses"]
    acceptance = float(np.mean([np.mean(r[method].acceptance_lengths) for r in responses]))
    time = float(np.mean([r[method].time_per_output_token for r in responses]))
    return acceptance, time


@pytest.mark.parametrize("name,turns,dataset,temperature,draft_attn,budgets", RUNS)
def test_figures_are_make_latex_tables(name, turns, dataset, temperature, draft_attn, budgets):
    run_data = load_run(str(FIXTURES / f"{name}.pt"))
    summary = summarise(run_data)
    assert summary["turns"] == turns == len(run_data["responses"])
    assert summary["args"] == {"dataset": dataset, "maxSamples": turns, "maxNewTokens": 64, "treeBudgets": budgets,
                               "temperature": temperature}
    assert (summary["draftAttnImplementation"], summary["targetAttnImplementation"]) == (draft_attn, "sdpa")
    methods = ["baseline", "dflash", *(f"ddtree_tb{b}" for b in budgets)]
    assert list(summary["methods"]) == methods
    # What the upstream functions themselves gave under the real torch.load (tests/fixtures/ddtree/generate.py).
    upstream = json.loads((FIXTURES / f"{name}.expected.json").read_text())["methods"]
    baseline_time = latex_table_figures(run_data, "baseline")[1]
    for method in methods:
        acceptance, time = latex_table_figures(run_data, method)
        figures = summary["methods"][method]
        assert figures["acceptanceLength"] == acceptance == upstream[method]["acceptanceLength"], method
        assert figures["timePerOutputTokenS"] == time == upstream[method]["timePerOutputTokenS"], method
        assert figures["speedup"] == baseline_time / time
    # build_rows: the DDTree budget with the highest speedup over the baseline, and DFlash's own row.
    best = max((f"ddtree_tb{b}" for b in budgets), key=lambda m: baseline_time / latex_table_figures(run_data, m)[1])
    assert summary["ddtree"] == {"method": best, "bestBudget": int(best.removeprefix("ddtree_tb")),
                                 "acceptanceLength": latex_table_figures(run_data, best)[0],
                                 "speedup": baseline_time / latex_table_figures(run_data, best)[1]}
    assert summary["dflash"] == {"acceptanceLength": latex_table_figures(run_data, "dflash")[0],
                                 "speedup": baseline_time / latex_table_figures(run_data, "dflash")[1]}


def test_tensors_become_shapes():
    run_data = load_run(str(FIXTURES / "run-mt-bench-t0.pt"))
    turn = run_data["responses"][0]["ddtree_tb64"]
    assert isinstance(turn, types.SimpleNamespace)
    stub = turn.output_ids
    assert isinstance(stub, ddtree_result.TensorStub) and stub.dtype == "int64"
    assert stub.shape == (1, turn.num_input_tokens + turn.num_output_tokens)
    assert turn.round_trees is None and set(turn.stage_times) >= {"draft", "tree_build", "verify", "commit"}


@pytest.mark.parametrize("numbers", [[1.0] * 7, [0.1] * 9, [0.3, 1e-9, 7.5] * 45, [x / 7 for x in range(1, 300)]])
def test_mean_is_numpys_to_the_bit(numbers):
    assert ddtree_result.np_mean(numbers, "x") == float(np.mean(numbers))


class Evil:
    def __init__(self, target, argument):
        self.target, self.argument = target, argument

    def __reduce__(self):
        return self.target, (self.argument,)


def archive_with(tmp_path: Path, payload: bytes, name: str = "run") -> Path:
    path = tmp_path / f"{name}.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/data.pkl", payload)
        archive.writestr(f"{name}/.format_version", "1")
        archive.writestr(f"{name}/byteorder", "little")
    return path


@pytest.mark.parametrize("target,argument,named", [
    (__import__("os").system, "touch {mark}", "system"),
    (eval, "open({mark!r}, 'w')", "builtins.eval"),
    (getattr(subprocess, "call"), ["touch", "{mark}"], "subprocess.call"),
])
def test_restricted_unpickler_refuses_code(tmp_path, target, argument, named):
    mark = tmp_path / "ran"
    argument = [a.format(mark=str(mark)) for a in argument] if isinstance(argument, list) else \
        argument.format(mark=str(mark))
    payload = pickle.dumps({"responses": [Evil(target, argument)], "args": {}}, protocol=2)
    path = archive_with(tmp_path, payload)
    with pytest.raises(ResultError, match=f"refused to load .*{named.split('.')[-1]}"):
        load_run(str(path))
    assert not mark.exists()


def test_a_persistent_id_other_than_a_storage_is_refused(tmp_path):
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("module", "os") if obj == "x" else None

    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump({"responses": ["x"]})
    with pytest.raises(ResultError, match="not a torch storage"):
        load_run(str(archive_with(tmp_path, buffer.getvalue())))


def cut(tmp_path: Path) -> Path:
    data = (FIXTURES / "run-mt-bench-t0.pt").read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(data[: len(data) // 2])
    return path


def storage_dropped(tmp_path: Path) -> Path:
    path = tmp_path / "dropped.pt"
    with zipfile.ZipFile(FIXTURES / "run-mt-bench-t0.pt") as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            if not item.filename.endswith("/data/3"):
                target.writestr(item, source.read(item))
    return path


def no_responses(tmp_path: Path) -> Path:
    return archive_with(tmp_path, pickle.dumps({"responses": [], "args": {}}, protocol=2))


def not_run_data(tmp_path: Path) -> Path:
    return archive_with(tmp_path, pickle.dumps([1, 2, 3], protocol=2))


def empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    return path


@pytest.mark.parametrize("make,reason", [
    (lambda t: t / "absent.pt", "no such file"),
    (empty, "not a torch.save archive"),
    (cut, "not a torch.save archive"),
    (storage_dropped, "storage 3 is not in the archive"),
    (no_responses, "no responses"),
    (not_run_data, "not benchmark.py's run_data"),
])
def test_bad_files_are_errors_naming_the_file(tmp_path, capsys, make, reason):
    path = make(tmp_path)
    assert main([str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"ddtree-result: {path}: ") and reason in captured.err


def test_main_prints_one_sorted_line(capsys):
    assert main([str(FIXTURES / "run-mt-bench-t0.pt")]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    prefix, _, body = line.partition(" ")
    assert prefix == "GPUHOSTS_DDTREE"
    assert body == json.dumps(json.loads(body), sort_keys=True)
    assert json.loads(body) == summarise(load_run(str(FIXTURES / "run-mt-bench-t0.pt")))


def test_shipped_script_runs_standalone(tmp_path):
    """The file the container receives runs with `python3 -I` (no gpuhosts, no site packages, no torch)."""
    script = render_ddtree_result_script()
    assert script.path == "/usr/local/lib/gpuhosts/ddtree-result.py" and script.mode == "0755"
    assert Path(ddtree_result.__file__).read_text().rstrip("\n") in script.content
    local = tmp_path / "ddtree-result.py"
    local.write_text(script.content)
    run = shutil.copy(FIXTURES / "run-gsm8k-t1-sdpa-drafter.pt", tmp_path / "run.pt")
    result = subprocess.run([sys.executable, "-I", "-S", str(local), str(run)], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.removeprefix("GPUHOSTS_DDTREE ")) == summarise(load_run(str(run)))
    bad = subprocess.run([sys.executable, "-I", "-S", str(local), str(tmp_path / "none.pt")], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "none.pt: no such file" in bad.stderr
