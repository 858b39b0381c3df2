"""TrainingNode: the root of a training node's resource tree; the plan itself is gpuhosts.plans.training_node."""

from __future__ import annotations

import pulumi

from components.host_units import materialize, target_of
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.training import TrainerStack


class TrainingNode(pulumi.ComponentResource):
    def __init__(self, stack: TrainerStack, secrets: dict[str, pulumi.Input[str]],
                 opts: pulumi.ResourceOptions | None = None):
        name = stack.node.name
        super().__init__("gpuhosts:training:TrainingNode", name, None, opts)
        plan = plan_training_node(stack)
        self.units, self.groups = materialize(plan.graph, self, "training", target_of(stack.node.ssh), secrets,
                                              timeouts=stack.node.ssh.operation_timeouts)
        self.summary = plan.summary
        self.register_outputs({"training": plan.summary})
