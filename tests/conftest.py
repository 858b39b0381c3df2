"""Shared fixtures: the kpro5 stack as data, and a copy of it to mutate."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from gpuhosts.plan import read_stack_file

# The shared harnesses' fixtures (the simulated host the scripts run on directly, ...), loaded by name: a test
# module imports no other test module.
pytest_plugins = ("simhost", "monitor_bed", "systemd_scratch")

PROJECT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Each process of the hostile-input suite leaves its counts here; the end of the run sums them into one line.
HOSTILE_FIGURES = PROJECT / "build" / "hostile-figures"


# The readiness waits of a stand-in engine: a cap that reports a hang, never a verdict on speed. A loaded machine
# (a start that waits for the GPUs another engine still holds, then systemd's RestartSec=) may need minutes.
READY_CAP_S = 600
# Where a test wants the "not healthy after N s" failure of an engine that never becomes healthy: the client waits on
# the simulated container's virtual clock (host setting `virtual_clock`), so no test waits the N seconds out.
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


# The full tier (`make test-full`): scenario suites that each converge hosts many times over. `make test` leaves
# them out and keeps, per unit kind, its plan and at least one converge on the simulated host (docs/testing.md).
# A module named here is full whole; "module::test" names one test (all its parameters).
FULL_TIER = {
    "test_alerts_end_to_end.py": "a real Prometheus and Alertmanager started and an alert carried to a webhook",
    "test_host_scripts.py": "the host units' scenarios, script by script",
    "test_service_scripts.py": "the services' scenarios, script by script",
    "test_training_scripts.py": "the training node's scenarios, script by script",
    "test_benchmark_unit.py": "the bake-off's failure cases against running engines",
    "test_host_fidelity_initramfs.py": "initramfs images built and rebooted",
    "test_host_fidelity_driver.py": "DKMS builds across kernels",
    "test_host_fidelity_vfio.py": "vfio binding cases",
    "test_host_fidelity_containers.py": "container config cases",
    "test_host_fidelity_boot.py": "reboots of a converged host",
    "test_hostile_input.py": "hundreds of generated hostile stacks",
    "test_rendering_rule.py::test_kpro5_with_hostile_values_converges_and_tears_down_on_the_simulated_host":
        "a converge with hostile values",
    "test_rendering_rule.py::test_trainer_with_hostile_values_trains_and_tears_down_on_the_simulated_node":
        "a converge with hostile values",
    "test_plan_inputs.py": "one gpuhosts plan process per malformed input",
    "test_fakehost_selftest.py": "the simulated host's own behaviour",
    "test_fakehost_engines.py": "the engine stand-ins' own behaviour",
    "test_fakehost_containers.py": "the simulated containers' own behaviour",
    "test_dataset_prepare_unit.py::test_a_source_converts_the_files_its_split_or_data_files_name":
        "one download and conversion per source layout",
    "test_dataset_prepare_unit.py::test_a_changed_count_remixes_and_retokenizes_without_downloading_or_converting":
        "a second prepare",
    "test_dataset_prepare_unit.py::test_an_interrupted_tokenize_resumes_and_reuses_the_rest": "a second prepare",
    "test_dataset_prepare_unit.py::test_a_gated_source_needs_the_token_which_never_shows": "a second prepare",
}
# Tests of a full-tier module that `make test` keeps: the one converge of a unit kind no quick module has.
QUICK_IN_FULL_MODULE = {
    "test_service_scripts.py::test_weights_on_host_storage_survive_in_the_host_directory":
        "ModelStore, and the services' kinds",
    "test_benchmark_unit.py::test_each_service_is_measured_in_turn_and_the_declared_one_runs_again": "Benchmark",
    "test_training_scripts.py::test_up_to_a_running_job_then_nothing_changes_and_destroy_keeps_the_results":
        "the training node's kinds",
}
TESTS = Path(__file__).resolve().parent


def tier_key(item) -> tuple[str, str]:
    module = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
    return module, f"{module}::{item.originalname}"


def pytest_collection_modifyitems(config, items):
    for item in items:
        module, test = tier_key(item)
        if (module in FULL_TIER and test not in QUICK_IN_FULL_MODULE) or test in FULL_TIER:
            item.add_marker(pytest.mark.full)


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
