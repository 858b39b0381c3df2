"""The bake-off through the real Pulumi CLI, with engines the simulated container really runs: `pulumi up` measures
once and keeps the table in the state, an `up` with the same inputs measures nothing, `gpuhosts bench` (from the
operator's clone, with the stack file `pulumi config` wrote) measures again without Pulumi and leaves the next `up`
nothing to do, and a new `runId` makes `up` measure again."""

from __future__ import annotations

import copy
import subprocess

import pytest

from fakehost import engines
from fakehost.util import configure
from realengine import Stack
from realengine.beds import Converged, fresh_name
from sshhost import free_port
from sshhost.bed import Bed, stack_document

pytestmark = pytest.mark.pulumi

BENCH = "ct129-bench-spec-bakeoff"
# A cap that reports a hang, never a verdict: the bake-off of two stand-in engines measures in seconds.
BENCH_CAP_S = 600


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    bed = Bed.seed(tmp_path_factory.mktemp("bench") / "bed")
    configure(bed.tree, serve_engines=True, engine_behaviour={
        "qwen-sglang": {"acceptance_length": 3.4, "acceptance_rate": 0.8, "tokens": 40},
        "qwen-vllm-dflash": {"accept_rate": 0.1, "tokens": 40}})
    try:
        yield bed
    finally:
        engines.stop_all(bed.tree)
        bed.close()


def bench_values(bed: Bed, ports: tuple[int, int], run_id: str | None = None) -> dict:
    values = bed.services_values(*ports)
    bench = copy.deepcopy(stack_document()["config"]["gpuhosts:benchmarks"][0])
    bench.pop("ddtree")  # fetched from GitHub; its job has tests of its own (tests/test_bench_table.py)
    bench.update(readyTimeoutS=30, prompts={"maxTokens": 32, "longContext": {"contextTokens": 100000}})
    if run_id:
        bench["runId"] = run_id
    values["benchmarks"] = [bench]
    return values


def measured(run) -> list[str]:
    """What the benchmark's unit did on the host in this run (the provider's log)."""
    return [script for unit, script in run.host_operations if unit == BENCH]


def gpuhosts_bench(host: Converged, name: str) -> subprocess.CompletedProcess:
    """`gpuhosts bench STACK NAME` as an operator runs it in the clone: the stack file the CLI keeps, the host's
    key from a file."""
    project = host.stack.project
    environment = {k: v for k, v in project.env.items() if k != "GPUHOSTS_SSH_KEY_FILE"}
    argv = [str(project.root / ".venv" / "bin" / "python"), "-m", "gpuhosts.cli", "bench", host.stack.name, name,
            "--stack-file", str(host.stack.file), "--ssh-key", str(host.bed.ssh.private_key)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=project.root, env=environment,
                          timeout=BENCH_CAP_S)


def test_up_measures_once_gpuhosts_bench_again_and_a_run_id_once_more(project, bed):
    ports = (free_port(), free_port())
    values = bench_values(bed, ports)
    host = Converged(bed, Stack(project, fresh_name("bakeoff"), "kpro5", values, bed.secrets()))
    first = host.up()
    assert first.changed().get(BENCH) == "create", first.changed()
    assert measured(first) == ["ensure"], first.host_operations
    rows = {row["run"]: row for row in host.state()[BENCH]["outputs"]["report"]["rows"]}
    assert rows["qwen-sglang"]["acceptanceLength"] == 3.4 and rows["qwen-vllm-dflash"]["acceptanceLength"] == \
        pytest.approx(2.5)  # 1 + 15 × 0.1, from vLLM's counters

    # Refreshed, in sync: nothing to measure.
    again = host.up()
    assert BENCH not in again.changed() and again.operations().get(BENCH) == "same", again.operations().get(BENCH)
    assert measured(again) == []

    state = host.state()[BENCH]["outputs"]
    result = gpuhosts_bench(host, "spec-bakeoff")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "measuring qwen-sglang" in result.stdout and "| qwen-vllm-dflash | vllm dflash |" in result.stdout
    # The forced run kept the inputs' marker: the next up still has nothing to do, and the state keeps the table
    # of the last `up` that measured.
    after_bench = host.up()
    assert BENCH not in after_bench.changed() and measured(after_bench) == [], after_bench.changed()
    assert host.state()[BENCH]["outputs"]["report"] == state["report"]

    unknown = gpuhosts_bench(host, "nope")
    assert unknown.returncode == 2  # input refused (gpuhosts/exit_codes.py)
    assert "'nope' is not a benchmark of this stack (declared: spec-bakeoff)" in unknown.stderr, unknown.stderr

    rerun = host.up(bench_values(bed, ports, run_id="again-1"))
    assert rerun.changed().get(BENCH) == "update", rerun.changed()
    assert measured(rerun) == ["ensure"], rerun.host_operations
