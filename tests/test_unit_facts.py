"""Every kind of unit names its facts: each unit of every committed stack's plan (kpro5 with its bake-off, kpro6,
the training node, and kpro5 with allowReboot and with its weights on host storage, for the kinds only those add)
declares desired facts its probe prints, or says why nothing of it can be read back (`Unit.no_facts_because`). A
unit with neither would show no drift whatever happened to it on the host."""

from __future__ import annotations

import copy
import shlex

import pytest

from conftest import KPRO5_SECRETS, PROJECT, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.plan import read_stack_file
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_stack, validate_trainer_stack
from gpuhosts.units import Unit


def _kpro5_variant(**changes) -> dict:
    values = kpro5_values(benchmarks=True)
    if changes.get("allow_reboot"):
        values["host"]["allowReboot"] = True
    if changes.get("weights_on_host"):
        values["containers"][0]["modelStore"] = {"hostPath": "/tank/models"}
        for service in values["services"]:
            service["weightsOn"] = "host"
    return values


def _kpro6() -> dict:
    values, _ = read_stack_file(PROJECT / "stacks" / "Pulumi.kpro6.yaml")
    return copy.deepcopy(values)


PLANS = {
    "kpro5 with benchmarks": lambda: list(plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))),
    "kpro5 with allowReboot": lambda: list(plan_host(validate_stack(_kpro5_variant(allow_reboot=True),
                                                                    KPRO5_SECRETS))),
    "kpro5 with weights on host storage": lambda: list(plan_host(validate_stack(_kpro5_variant(weights_on_host=True),
                                                                                KPRO5_SECRETS))),
    "kpro6": lambda: list(plan_host(validate_stack(_kpro6(), KPRO5_SECRETS))),
    "trainer": lambda: list(plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph),
}
UNITS = {name: plan() for name, plan in PLANS.items()}


def every_unit():
    return [pytest.param(unit, id=f"{stack}:{unit.key}") for stack, units in UNITS.items() for unit in units]


@pytest.mark.parametrize("unit", every_unit())
def test_a_unit_declares_facts_or_says_why_it_has_none(unit: Unit):
    assert unit.desired or unit.no_facts_because.strip(), (
        f"{unit.key} ({unit.kind}) declares no facts and no reason (Unit.no_facts_because): a refresh would never "
        "see it drift")


@pytest.mark.parametrize("unit", every_unit())
def test_every_desired_fact_is_one_the_probe_prints(unit: Unit):
    printed = [name for name in unit.desired if f"fact {shlex.quote(name)} " not in unit.probe]
    assert not printed, f"{unit.key}: the probe prints no fact {printed}"


@pytest.mark.parametrize("unit", every_unit())
def test_every_file_a_unit_installs_is_a_fact_by_its_digest(unit: Unit):
    unread = [f.path for f in unit.files if f"file {f.path}" not in unit.desired]
    assert not unread, f"{unit.key} installs {unread} without a `file PATH` fact (sha256 and mode)"


def test_the_plans_cover_every_kind_of_unit():
    kinds = {unit.kind for units in UNITS.values() for unit in units}
    assert kinds >= {"VfioBinding", "NvidiaDriver", "HostReboot", "LxcGpuPassthrough", "NvidiaDeviceNodes", "ContainerUserspace",
                     "ModelStore", "PythonEnv", "ModelDownload", "DDTreeCheckout", "InferenceService", "DeployGate",
                     "Benchmark", "Preflight", "DrafterConvert", "HiddenStateServer", "HiddenStateCheck",
                     "TrainingJob", "TrainingMonitor"}, sorted(kinds)

