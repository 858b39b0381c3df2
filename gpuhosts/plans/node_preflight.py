"""Preflight: the training node has the GPUs, the driver and the disk the stack declares, before anything is
installed; it only checks."""

from __future__ import annotations

from gpuhosts.compat import model_facts
from gpuhosts.plans.node_units import check_unit
from gpuhosts.render import render
from gpuhosts.training import TrainerStack
from gpuhosts.units import Unit

PREFLIGHT = "preflight"
# What a model takes on disk when neither the stack nor the model table says (the verifier's and the drafter's).
DEFAULT_VERIFIER_GB = 60
DEFAULT_DRAFTER_GB = 5


def disk_needed_gb(stack: TrainerStack) -> int:
    """The verifier, the drafter, the data set and the checkpoints' reserve, rounded up to whole GB."""
    training = stack.training
    return int((training.verifier.size_gb or model_facts(training.verifier.repo).size_gb or DEFAULT_VERIFIER_GB)
               + (training.drafter.size_gb or model_facts(training.drafter.repo).size_gb or DEFAULT_DRAFTER_GB)
               + training.dataset.size_gb + training.checkpoints_reserve_gb + 0.999)


def plan_preflight(stack: TrainerStack) -> Unit:
    training = stack.training
    present = [stack.model_dir(training.verifier), stack.model_dir(training.drafter), stack.dataset_dir,
               stack.checkpoints]
    return check_unit(PREFLIGHT, "Preflight",
                      render("training_node/preflight.sh.j2", unit=PREFLIGHT, node=stack.node,
                             need_gb=disk_needed_gb(stack), present_dirs=present),
                      render("training_node/preflight-teardown.sh.j2", unit=PREFLIGHT), ())
