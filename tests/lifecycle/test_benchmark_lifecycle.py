"""The bake-off through the provider over real SSH (tests/sshhost/bed.py), with engines the simulated container
really runs: `up` measures once, an `up` with the same inputs measures nothing, `gpuhosts bench` measures again
without Pulumi, and a new `runId` makes `up` measure again."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest

from fakehost import engines
from fakehost.util import configure
from sshhost import free_port
from sshhost.bed import PROJECT, Bed, stack_document

SECURE = {"secure": "v1:AAABAGxvY2tlZC1ieS10aGUtY2xpLW5vdC1oZXJlCg=="}
BENCH = "ct129-bench-spec-bakeoff"


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


def ops_of(ops, name: str) -> list[str]:
    return [op.operation for op in ops if op.name == name and op.operation != "read"]


def test_up_measures_once_gpuhosts_bench_again_and_a_run_id_once_more(bed, tmp_path):
    ports = (free_port(), free_port())
    values = bench_values(bed, ports)
    first = bed.up(values)
    assert ops_of(first, BENCH) == ["create"]
    state = {e["name"]: e for e in bed.engine.state().values()}
    rows = {row["run"]: row for row in state[BENCH]["outputs"]["report"]["rows"]}
    assert rows["qwen-sglang"]["acceptanceLength"] == 3.4 and rows["qwen-vllm-dflash"]["acceptanceLength"] == \
        pytest.approx(2.5)  # 1 + 15 × 0.1, from vLLM's counters

    assert ops_of(bed.up(values), BENCH) == []  # refreshed, in sync: nothing to measure

    stack = bed.write_stack({**values, "sshPrivateKey": SECURE})
    argv = [sys.executable, "-m", "gpuhosts.cli", "bench", "kpro5", "spec-bakeoff", "--stack-file", str(stack),
            "--ssh-key", str(bed.ssh.private_key)]
    environment = {k: v for k, v in os.environ.items() if k != "GPUHOSTS_SSH_KEY_FILE"}
    result = subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env=environment, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "measuring qwen-sglang" in result.stdout and "| qwen-vllm-dflash | vllm dflash |" in result.stdout
    # The forced run kept the inputs' marker: the next up still has nothing to do.
    assert ops_of(bed.up(values), BENCH) == []

    unknown = subprocess.run([*argv[:5], "nope", *argv[6:]], capture_output=True, text=True, cwd=PROJECT,
                             env=environment, timeout=120)
    assert unknown.returncode == 2  # input refused (gpuhosts/exit_codes.py)
    assert "'nope' is not a benchmark of this stack (declared: spec-bakeoff)" in unknown.stderr

    assert ops_of(bed.up(bench_values(bed, ports, run_id="again-1")), BENCH) == ["update"]
