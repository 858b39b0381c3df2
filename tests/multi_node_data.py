"""The trainer stack as two nodes of four GPUs (`gpuhosts:multiNode`), and what the plan makes of it.
"""

from __future__ import annotations

import copy
from conftest import TRAINER_SECRETS, trainer_values
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_trainer_stack


def two_nodes() -> dict:
    values = trainer_values()
    other = copy.deepcopy(values["node"])
    other.update(name="trainer-2", ssh={**other["ssh"], "host": "192.0.2.41"})
    values["multiNode"] = {"nodes": [other], "rendezvous": {"host": "10.10.0.40", "id": "dflash-qwen36"}}
    return values


def planned(values: dict) -> dict:
    return plan_training_node(validate_trainer_stack(values, TRAINER_SECRETS)).summary["multiNode"]
