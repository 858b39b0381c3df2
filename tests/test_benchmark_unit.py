"""The Benchmark unit on the simulated kpro5, against engine stand-ins the container really runs (host setting
`serve_engines`: `systemctl start` runs the unit's ExecStart and the engine answers as its flags say;
tests/fakehost/engines.py). The figures an engine's metrics decide are exact here; the timed ones are only checked
to be there (a benchmark measures time, a test does not)."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, NEVER_HEALTHY_WAIT_S, READY_CAP_S, kpro5_values
from fakehost import engines, host_env
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from fakehost.util import configure
from gpuhosts.bench_cli import forced
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.protocol import parse_facts, parse_result
from gpuhosts.stacks import validate_stack
from sshhost import free_port

VERSION = "580.126.09"
SECRETS = {"hfToken": "hf_BenchTestToken7d2c91", "llmApiKey": "sk-bench-test-key-5a0e3f"}
CT = "var/lib/lxc/129/rootfs"
SGLANG, VLLM = "gpuhosts-qwen-sglang.service", "gpuhosts-qwen-vllm-dflash.service"
RESULTS = "var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff"
BEHAVIOUR = {"qwen-sglang": {"acceptance_length": 3.1, "acceptance_rate": 0.7, "tokens": 40,
                             "long_context_slowdown": 0.12},
             "qwen-vllm-dflash": {"accept_rate": 0.04, "tokens": 40}}


def stack_values(ports: tuple[int, int], run_file: Path, sha256: str) -> dict:
    values = kpro5_values(benchmarks=True)
    values["nvidia"].update(url=f"file://{run_file}", sha256=sha256)
    for service, port in zip(values["services"], ports):
        service.update(port=port, bind="127.0.0.1")
        service["gate"].update(readyTimeoutS=READY_CAP_S, maxTokens=32)
    bench = values["benchmarks"][0]
    bench.pop("ddtree")  # the reference job has its own test below
    bench.update(readyTimeoutS=READY_CAP_S)
    bench["prompts"].update(maxTokens=32, longContext={"contextTokens": 100000})
    return values


def run(tree: Path, script: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], input=stdin, capture_output=True, text=True, env=host_env(tree),
                          timeout=300)


def apply(tree: Path, unit, script: str | None = None) -> subprocess.CompletedProcess:
    stdin = SECRETS[unit.stdin_secret] + "\n" if unit.stdin_secret else ""
    return run(tree, script or unit.ensure, stdin)


def pct(tree: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["pct", "exec", "129", "--", *argv], capture_output=True, text=True, env=host_env(tree),
                          timeout=60)


def state(tree: Path, unit_name: str) -> str:
    return pct(tree, "systemctl", "is-active", unit_name).stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """kpro5 converged with both services installed in container 129, before any engine ran (serve_engines off)."""
    root = tmp_path_factory.mktemp("bench")
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    sha256 = make_fake_run(run_file, VERSION)
    tree = seed_kpro5(root / "kpro5")
    values = stack_values((free_port(), free_port()), run_file, sha256)
    graph = plan_host(validate_stack(values, KPRO5_SECRETS))
    for unit in graph.apply_order:
        if unit.kind not in ("DeployGate", "Benchmark"):
            result = apply(tree, unit)
            assert result.returncode == 0, f"{unit.key}:\n{result.stdout}\n{result.stderr}"
    return tree, graph, values


@pytest.fixture
def host(installed, tmp_path):
    """A copy with the declared state running: SGLang started (enabled), vLLM stopped; the engines really run."""
    source, graph, _values = installed
    tree = tmp_path / "kpro5"
    shutil.copytree(source, tree, symlinks=True)
    configure(tree, serve_engines=True, engine_behaviour=BEHAVIOUR)
    try:
        assert pct(tree, "systemctl", "restart", SGLANG).returncode == 0
        yield tree, graph
    finally:
        engines.stop_all(tree)


def bench_unit(graph):
    return graph["ct129-bench-spec-bakeoff"]


def rows(report: dict) -> dict[str, dict]:
    return {row["run"] if row["run"] != "ddtree reference" else row["method"]: row for row in report["rows"]}


def test_each_service_is_measured_in_turn_and_the_declared_one_runs_again(host):
    tree, graph = host
    unit = bench_unit(graph)
    result = apply(tree, unit)
    assert result.returncode == 0, result.stdout + result.stderr
    outcome = parse_result(result.stdout)
    assert outcome.changed
    table = rows(outcome.report)
    sglang, vllm = table["qwen-sglang"], table["qwen-vllm-dflash"]
    assert (sglang["status"], vllm["status"]) == ("ok", "ok"), outcome.report
    # SGLang's gauges as its metrics give them (averaged over the prompts, so in floating point); vLLM's from its
    # counters: length 1 + 15 × 0.04, rate 0.04.
    assert (sglang["acceptanceLength"], sglang["acceptanceRate"]) == (pytest.approx(3.1), pytest.approx(0.7))
    assert vllm["acceptanceLength"] == pytest.approx(1.6) and vllm["acceptanceRate"] == pytest.approx(0.04)
    for row in (sglang, vllm):
        assert row["decodeTokensPerS"] > 0 and row["ttftS"] >= 0 and row["longContextDecodeRatio"] > 0
    assert "measuring qwen-sglang" in result.stdout and "measuring qwen-vllm-dflash" in result.stdout
    # Back as declared: the enabled SGLang serves, the stopped vLLM is stopped.
    assert (state(tree, SGLANG), state(tree, VLLM)) == ("active", "inactive")
    saved = json.loads((tree / RESULTS / "results.json").read_text())
    assert saved == outcome.report
    page = (tree / RESULTS / "results.md").read_text()
    assert "| qwen-sglang | sglang mtp |" in page and "| 3.10 | 70.0% |" in page
    facts = parse_facts(run(tree, unit.probe).stdout)
    assert {name: facts[name] for name in unit.desired} == unit.desired


def test_unchanged_inputs_measure_nothing_and_the_forced_form_measures_again(host):
    tree, graph = host
    unit = bench_unit(graph)
    assert apply(tree, unit).returncode == 0
    again = apply(tree, unit)
    assert again.returncode == 0 and not parse_result(again.stdout).changed
    assert "measuring" not in again.stdout and parse_result(again.stdout).report["rows"]
    rerun = apply(tree, unit, forced(unit.ensure, unit.key))
    assert rerun.returncode == 0 and parse_result(rerun.stdout).changed and "measuring qwen-sglang" in rerun.stdout
    # The forced run keeps the marker of the same inputs: a refresh after it sees no drift.
    facts = parse_facts(run(tree, unit.probe).stdout)
    assert {name: facts[name] for name in unit.desired} == unit.desired


def drop_flag(tree: Path, unit_name: str, flag: str) -> None:
    path = tree / CT / "etc/systemd/system" / unit_name
    lines = path.read_text().splitlines()
    kept = [line for line in lines if line.strip().rstrip("\\").strip() != flag]
    assert len(kept) == len(lines) - 1, f"{flag} is not a line of {unit_name}"
    path.write_text("\n".join(kept) + "\n")
    assert pct(tree, "systemctl", "daemon-reload").returncode == 0


def test_an_sglang_without_enable_metrics_fails_its_row_and_the_services_are_restored(host):
    tree, graph = host
    drop_flag(tree, SGLANG, "--enable-metrics")
    # As systemd does, a changed unit file reaches the running engine only with a restart.
    assert pct(tree, "systemctl", "restart", SGLANG).returncode == 0
    result = apply(tree, bench_unit(graph))
    assert result.returncode != 0
    assert "refused: benchmark spec-bakeoff failed" in result.stderr
    table = rows(json.loads((tree / RESULTS / "results.json").read_text()))
    assert table["qwen-sglang"]["status"].startswith("failed: /metrics answered 404")
    assert table["qwen-sglang"]["acceptanceLength"] is None
    assert table["qwen-vllm-dflash"]["status"] == "ok"
    assert (state(tree, SGLANG), state(tree, VLLM)) == ("active", "inactive")
    # No marker for a failed run: the next `pulumi up` measures again.
    assert not (tree / RESULTS / "inputs").exists()


def test_a_service_that_never_becomes_healthy_fails_the_run_and_the_declared_one_serves_again(installed, host):
    tree, _graph = host
    values = copy.deepcopy(installed[2])
    values["benchmarks"][0]["readyTimeoutS"] = NEVER_HEALTHY_WAIT_S
    unit = bench_unit(plan_host(validate_stack(values, KPRO5_SECRETS)))
    # The client waits readyTimeoutS of its own clock, which runs only while it sleeps: the verdict is the same on
    # any machine, and no test waits for it.
    configure(tree, engine_behaviour={**BEHAVIOUR, "qwen-vllm-dflash": {"fail": "health"}}, virtual_clock=["bench.py"])
    result = apply(tree, unit)
    assert result.returncode != 0
    table = rows(json.loads((tree / RESULTS / "results.json").read_text()))
    assert f"not healthy after {NEVER_HEALTHY_WAIT_S} s: /health answered 503" in table["qwen-vllm-dflash"]["status"]
    assert table["qwen-sglang"]["status"] == "ok"
    assert "services restored as declared: qwen-sglang=running qwen-vllm-dflash=stopped" in result.stdout
    assert (state(tree, SGLANG), state(tree, VLLM)) == ("active", "inactive")


# A stand-in of liranringel/ddtree benchmark.py `main` at c96427a185677bf4133ed865dd1626a5041aef9b with the patch's
# part (d): the flags it parses (tests/test_ddtree_reference.py reads them from the patched file), its prompts file
# read with its own prompts.py rule (every prompt named, with messages), no figure printed, and the run it
# torch.save-s at --save-path (here the fixture real torch 2.11 wrote, tests/fixtures/ddtree/README.md).
STAND_IN = '''import argparse, json, os, shutil
parser = argparse.ArgumentParser()
for flag in ("--model-name-or-path", "--draft-name-or-path", "--save-path"):
    parser.add_argument(flag, required=True)
for flag in ("--block-size", "--tree-budget", "--dataset", "--prompts", "--max-samples", "--max-new-tokens",
             "--temperature"):
    parser.add_argument(flag)
parser.add_argument("--thinking", choices=["on", "off"], default="off")
args = parser.parse_args()
root = os.environ.get("GPUHOSTS_HOST_ROOT", "")
with open(root + args.prompts) as handle:
    assert all(p["name"] and p["messages"] for p in json.load(handle)["prompts"])
# What the authors' benchmark.py leaves behind: the run it torch.save-d (the fixture real torch wrote).
shutil.copy(RUN, root + args.save_path)
'''
# The same stand-in when the target does not fit: benchmark.py dies with torch 2.11's message for a failed CUDA
# allocation (torch.OutOfMemoryError; c10/cuda/CUDACachingAllocator.cpp builds the text) and saves nothing.
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total capacity of "
       "47.40 GiB of which 812.00 MiB is free. Including non-PyTorch memory, this process has 46.59 GiB memory in use.")
OOM_STAND_IN = STAND_IN.replace("# What the authors'", f"import sys\nsys.exit('Traceback (most recent call last):\\n' + {OOM!r})\n# What the authors'")
GIT = ["git", "-c", "user.name=gpuhosts tests", "-c", "user.email=tests@gpuhosts.invalid"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("stand_in", [STAND_IN, OOM_STAND_IN], ids=["saved run", "out of GPU memory"])
def test_the_ddtree_reference_runs_after_the_services_and_adds_its_rows(installed, host, tmp_path, monkeypatch,
                                                                        stand_in):
    """The reference through the plan's own units: its checkout (a stand-in repository served bare over file://,
    a patch made against it) and the benchmark's job, whose benchmark.py leaves the run real torch wrote, or dies
    out of GPU memory: then its row says so, and the services are measured and restored all the same."""
    import gpuhosts.benchmarks as benchmarks
    import gpuhosts.plans.container_services as container_services

    tree, _graph = host
    fixture = Path(__file__).parent / "fixtures" / "ddtree" / "run-mt-bench-t0.pt"
    work = tmp_path / "ddtree-work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "benchmark.py").write_text(f"RUN = {str(fixture)!r}\n" + stand_in)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "release", cwd=work)
    bare = tmp_path / "ddtree.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    (work / "benchmark.py").write_text((work / "benchmark.py").read_text() + "# patched for the GDN-hybrid target\n")
    patch = "A reviewed patch.\n\n" + git("diff", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work).strip()

    values = copy.deepcopy(installed[2])
    values["benchmarks"] = kpro5_values(benchmarks=True)["benchmarks"]
    config = validate_stack(values, KPRO5_SECRETS)
    (bench,) = config.benchmarks
    kpro5_commit = bench.ddtree.commit
    reference = bench.ddtree.model_copy(update={
        "repository": f"file://{bare}", "commit": commit,
        "patch": bench.ddtree.patch.model_copy(update={"sha256": hashlib.sha256(patch.encode()).hexdigest()})})
    bench = bench.model_copy(update={"ddtree": reference, "ready_timeout_s": READY_CAP_S,
                                     "prompts": bench.prompts.model_copy(update={"max_tokens": 32})})
    config = config.model_copy(update={"benchmarks": (bench,)})
    monkeypatch.setattr(container_services, "patch_text", lambda _bench: patch)
    # The stand-in commit installs the committed commit's lock (locks/ddtree/ holds one per DDTree commit).
    real_lock = benchmarks.ddtree_lock
    monkeypatch.setattr(benchmarks, "ddtree_lock",
                        lambda ref: real_lock(ref.model_copy(update={"commit": kpro5_commit})))
    graph = plan_host(config)
    for key in ("ct129-env-ddtree-spec-bakeoff", "ct129-ddtree-spec-bakeoff", "ct129-bench-spec-bakeoff"):
        result = apply(tree, graph[key])
        assert result.returncode == 0, f"{key}:\n{result.stdout}\n{result.stderr}"
    report = parse_result(result.stdout).report
    table = rows(report)
    assert table["qwen-sglang"]["status"] == "ok" and table["qwen-vllm-dflash"]["status"] == "ok"
    assert (state(tree, SGLANG), state(tree, VLLM)) == ("active", "inactive")
    if stand_in is OOM_STAND_IN:
        # A finding, not a failed benchmark: the row names torch's message; the table and its inputs are kept.
        assert table["DDTree"]["status"] == ("failed: out of GPU memory: " + OOM + " (benchmark.py exited with status 1;"
                                             " see /var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/benchmark.log)")
        assert table["DDTree"]["acceptanceLength"] is None
        assert json.loads((tree / RESULTS / "results.json").read_text()) == report
        assert (tree / RESULTS / "inputs").exists()
        return
    # make_latex_table's figures of the saved run (tests/fixtures/ddtree/run-mt-bench-t0.expected.json).
    expected = json.loads(fixture.with_name("run-mt-bench-t0.expected.json").read_text())["methods"]
    assert table["DFlash"]["acceptanceLength"] == expected["dflash"]["acceptanceLength"]
    (best,) = [name for name in table if name.startswith("DDTree (budget ")]
    budget = best.removeprefix("DDTree (budget ").removesuffix(")")
    assert table[best]["acceptanceLength"] == expected[f"ddtree_tb{budget}"]["acceptanceLength"]
    assert "running the DDTree reference" in result.stdout
    assert (state(tree, SGLANG), state(tree, VLLM)) == ("active", "inactive")

