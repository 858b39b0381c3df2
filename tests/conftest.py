"""Shared fixtures: the kpro5 stack as data, and a copy of it to mutate."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from gpuhosts.plan import read_stack_file

PROJECT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Each process of the hostile-input suite leaves its counts here; the end of the run sums them into one line.
HOSTILE_FIGURES = PROJECT / "build" / "hostile-figures"


# The readiness waits of a stand-in engine: a cap that reports a hang, never a verdict on speed. A loaded machine
# (a start that waits for the GPUs another engine still holds, then systemd's RestartSec=) may need minutes.
READY_CAP_S = 600
# Where a test wants the "not healthy after N s" failure of an engine that never becomes healthy: the wait then runs
# out whatever the machine's speed, so its verdict does not depend on it.
NEVER_HEALTHY_WAIT_S = 30

# What `pulumi config set --secret` gives kpro5 before its first `pulumi up`.
KPRO5_SECRETS = frozenset({"sshPrivateKey", "hfToken", "llmApiKey"})


def kpro5_values(benchmarks: bool = False) -> dict:
    """kpro5's values; its bake-off only when asked: it fetches DDTree from its repository and measures engines,
    which the tests of the host and its services leave to tests/test_benchmark_unit.py."""
    values, _secure = read_stack_file(PROJECT / "stacks" / "Pulumi.kpro5.yaml")
    values = copy.deepcopy(values)
    if not benchmarks:
        values.pop("benchmarks", None)
    return values


# What `pulumi config set --secret` gives the training node.
TRAINER_SECRETS = frozenset({"sshPrivateKey", "hfToken"})


def trainer_values() -> dict:
    values, _secure = read_stack_file(PROJECT / "stacks" / "Pulumi.trainer.yaml")
    return copy.deepcopy(values)


@pytest.fixture
def trainer() -> dict:
    return trainer_values()


@pytest.fixture
def kpro5() -> dict:
    return kpro5_values()


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        shutil.rmtree(HOSTILE_FIGURES, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput") or not HOSTILE_FIGURES.is_dir():
        return
    totals: dict[str, int] = {}
    for path in HOSTILE_FIGURES.glob("*.json"):
        for key, value in json.loads(path.read_text()).items():
            totals[key] = totals.get(key, 0) + value
    if totals:
        terminalreporter.write_line("hostile: " + " ".join(f"{key}={totals[key]}" for key in
                                                           ("tried", "refused", "rendered_safe", "executed",
                                                            "deleted_outside")))
