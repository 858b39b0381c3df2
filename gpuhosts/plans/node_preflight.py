"""Preflight: the training node has the GPUs, the driver and the disk the stack declares, before anything is
installed; it only checks."""

from __future__ import annotations

import shlex

from gpuhosts.compat import model_facts
from gpuhosts.dataset_size import dataset_size_gb
from gpuhosts.facts import Fact
from gpuhosts.plans.node_units import check_unit
from gpuhosts.render import render
from gpuhosts.training import TrainerStack
from gpuhosts.units import Unit

PREFLIGHT = "preflight"
# What a model takes on disk when neither the stack nor the model table says (the verifier's and the drafter's).
DEFAULT_VERIFIER_GB = 60
DEFAULT_DRAFTER_GB = 5


def disk_needed_gb(stack: TrainerStack) -> int:
    """The verifier, the drafter, the data set (a mix's size derived from measured bytes per token) and the
    checkpoints' reserve, rounded up to whole GB."""
    training = stack.training
    return int((training.verifier.size_gb or model_facts(training.verifier.repo).size_gb or DEFAULT_VERIFIER_GB)
               + (training.drafter.size_gb or model_facts(training.drafter.repo).size_gb or DEFAULT_DRAFTER_GB)
               + dataset_size_gb(training) + training.checkpoints_reserve_gb + 0.999)


def preflight_facts(stack: TrainerStack) -> list[Fact]:
    """The node's GPUs and driver as nvidia-smi reports them, read again on every refresh with the rule the
    pre-flight applies (at least the stack's count, each named for its model, one driver): a GPU gone or another
    driver loaded since is drift of the pre-flight."""
    gpus = stack.node.gpus
    setup = ("preflight_gpus=\"$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)\" || true",)
    model, count = shlex.quote(gpus.model), int(gpus.count)
    counted = ('awk -F", *" -v model=' + model + ' -v want=' + str(count) + ' \'NF { n++; if (index($1, model)) m++; '
               'else other = other ", " $1 } END { if (!n) print "no GPU"; else if (m >= want && !other) '
               'print "at least " want " × " model; else print m + 0 " × " model other " (the stack needs " want ")" }\' '
               '<<<"$preflight_gpus"')
    drivers = 'awk -F", *" \'NF { print $2 }\' <<<"$preflight_gpus" | sort -u | paste -sd " " - | grep . || echo none'
    return [Fact("GPUs", counted, f"at least {count} × {gpus.model}", setup),
            Fact("driver", drivers, stack.node.driver_version, setup)]


def plan_preflight(stack: TrainerStack) -> Unit:
    training = stack.training
    present = [stack.model_dir(training.verifier), stack.model_dir(training.drafter), stack.dataset_dir,
               stack.checkpoints]
    return check_unit(PREFLIGHT, "Preflight",
                      render("node_preflight/preflight.sh.j2", unit=PREFLIGHT, node=stack.node,
                             need_gb=disk_needed_gb(stack), present_dirs=present),
                      render("common/nothing.sh.j2", unit=PREFLIGHT, reason="it only checks"), (),
                      preflight_facts(stack))
