"""A multi-node training run (`gpuhosts:multiNode`), planned and checked: every node's torchrun rendezvous and its
hidden-state server, and the stacks that cannot run. What torchrun's own parser read of the plan is in
tests/fixtures/torchrun/parsed.json (tests/verify_torchrun/check_torchrun.py wrote it with torch's
`get_args_parser`, `parse_args` and `config_from_args`); the plan is held to it here."""

from __future__ import annotations

import json

import pytest

from conftest import PROJECT, TRAINER_SECRETS, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_trainer_stack
from multi_node_data import planned, two_nodes

PARSED = PROJECT / "tests" / "fixtures" / "torchrun" / "parsed.json"






def test_every_node_gets_the_same_rendezvous_and_a_server_of_its_own():
    plan = planned(two_nodes())
    assert (plan["nnodes"], plan["nprocPerNode"], plan["worldSize"]) == (2, 4, 8)
    assert plan["rendezvous"] == {"backend": "c10d", "endpoint": "10.10.0.40:29400", "id": "dflash-qwen36",
                                  "storeOn": "trainer"}
    first, second = plan["nodes"]
    assert (first["name"], first["converged"], second["name"], second["converged"]) == \
        ("trainer", True, "trainer-2", False)
    assert first["argv"] == second["argv"]
    argv = first["argv"]
    assert "--standalone" not in argv
    assert argv[1:11] == ["--nnodes", "2", "--nproc-per-node", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                          "10.10.0.40:29400", "--rdzv-id", "dflash-qwen36"]
    for node in plan["nodes"]:
        assert node["server"]["gpus"] == [0, 1, 2, 3] and node["trainingGpus"] == [4, 5, 6, 7]
        assert node["server"]["url"].startswith("http://127.0.0.1:")
    # The trainer of each node reads its own node's server.
    assert argv[argv.index("--vllm-endpoint") + 1] == f"{first['server']['url']}/v1"


def test_a_stack_without_multi_node_plans_one_node_as_before():
    summary = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).summary
    assert "multiNode" not in summary


def test_torchruns_own_parser_read_the_planned_command_line_as_planned():
    """The fixture is what torch's parser made of this very plan; a change to the plan's words shows here until
    `tests/verify_torchrun/check_torchrun.py` is run again."""
    parsed = json.loads(PARSED.read_text())
    plan = planned(two_nodes())
    assert parsed["argv"] == plan["nodes"][0]["argv"][1:]
    assert parsed["parsed"]["nnodes"] == "2" and parsed["parsed"]["nproc_per_node"] == "4"
    launch = parsed["launchConfig"]
    assert (launch["min_nodes"], launch["max_nodes"], launch["nproc_per_node"]) == (2, 2, 4)
    assert (launch["rdzv_backend"], launch["rdzv_endpoint"], launch["run_id"]) == \
        ("c10d", plan["rendezvous"]["endpoint"], plan["rendezvous"]["id"])
    # Each worker runs the trainer's script under the interpreter, with the planned arguments.
    assert parsed["program"] == "<python>"
    assert parsed["programArgs"] == ["-u", *plan["nodes"][0]["argv"][11:]]


def _set(path, value):
    def change(values):
        target = values
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


CASES = [
    ("a node named twice", _set(["multiNode", "nodes", 0, "name"], "trainer"), "gpuhosts:multiNode.nodes[0].name",
     "already gpuhosts:node's name"),
    ("one machine twice", _set(["multiNode", "nodes", 0, "ssh", "host"], "192.0.2.40"),
     "gpuhosts:multiNode.nodes[0].ssh.host", "a machine of its own"),
    ("a node without the GPUs the run places", _set(["multiNode", "nodes", 0, "gpus", "count"], 4),
     "gpuhosts:multiNode.nodes[0].gpus.count", "places GPU 7 on every node"),
    ("another driver", _set(["multiNode", "nodes", 0, "driverVersion"], "570.148.08"),
     "gpuhosts:multiNode.nodes[0].driverVersion", "one driver"),
    ("a rendezvous id with a space", _set(["multiNode", "rendezvous", "id"], "dflash run"),
     "gpuhosts:multiNode.rendezvous.id", "not a rendezvous id"),
    ("no further node", _set(["multiNode", "nodes"], []), "gpuhosts:multiNode.nodes", "at least 1"),
]


@pytest.mark.parametrize("case, change, path, words", CASES, ids=[c[0] for c in CASES])
def test_a_multi_node_run_that_cannot_run_is_refused_naming_the_field(case, change, path, words):
    values = two_nodes()
    change(values)
    with pytest.raises(ConfigError) as error:
        validate_trainer_stack(values, TRAINER_SECRETS)
    found = [str(p) for p in error.value.problems]
    assert any(p.startswith(f"{path}:") and words in p for p in found), found
