"""Hostile or mistaken values refused at plan time, each naming its field: a table of (what, change, path, words)."""

from __future__ import annotations

import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack
from gpuhosts.stacks import validate_trainer_stack


def service(values, index=0):
    return values["services"][index]


def training(values):
    return values["training"]


KPRO5_CASES = [
    ("hostname runs a command", lambda v: v["containers"][0].update(hostname="$(touch /tmp/x)"),
     "gpuhosts:containers[0].hostname", "is not a host name"),
    ("newline in localDir", lambda v: service(v)["model"].update(localDir="/srv/models/x\nGPUHOSTS_INNER\ntouch /x"),
     "gpuhosts:services[0]", "control character"),
    ("newline in the model store", lambda v: v["containers"][0].update(modelStore={"hostPath": "/tank/m\nrm -rf /"}),
     "gpuhosts:containers[0]", "control character"),
    ("newline in repository", lambda v: service(v)["engine"].update(repository="https://x/y\ntouch /z", gitRef="0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90"),
     "gpuhosts:services[0]", "control character"),
    ("newline in an environment value", lambda v: service(v).update(environment={"NCCL_DEBUG": "INFO\nExecStartPre=/bin/x"}),
     "gpuhosts:services[0]", "control character"),
    ("newline in extraArgs", lambda v: service(v).update(extraArgs=["--x\n--y"]), "gpuhosts:services[0]",
     "control character"),
    ("bind is a name", lambda v: service(v).update(bind="localhost"), "gpuhosts:services[0].bind", "write 127.0.0.1"),
    ("bind with a newline", lambda v: service(v).update(bind="0.0.0.0\nx"), "gpuhosts:services[0]",
     "control character"),
    ("the host's /etc as model store", lambda v: v["containers"][0].update(modelStore={"hostPath": "/etc"}),
     "gpuhosts:containers[0].modelStore.hostPath", "system directory"),
    ("Proxmox's own tree as model store", lambda v: v["containers"][0].update(modelStore={"hostPath": "/etc/pve/x"}),
     "gpuhosts:containers[0].modelStore.hostPath", "belongs to the system"),
    ("localDir /etc", lambda v: service(v)["model"].update(localDir="/etc", deleteOnDestroy=True),
     "gpuhosts:services[0].model.localDir", "system directory"),
    ("localDir /", lambda v: service(v)["model"].update(localDir="/", deleteOnDestroy=True),
     "gpuhosts:services[0].model.localDir", "system directory"),
    ("localDir not normalised", lambda v: service(v)["model"].update(localDir="/srv/models/../../etc"),
     "gpuhosts:services[0].model.localDir", "not a normalised path"),
    ("repo with a quote", lambda v: service(v)["model"].update(repo="Qwen/Qwen3.6'27B"),
     "gpuhosts:services[0].model.repo", "not a Hugging Face repository"),
    ("revision climbing", lambda v: service(v)["model"].update(revision="../main"),
     "gpuhosts:services[0].model.revision", "not a revision"),
    ("ssh host with a space", lambda v: v["host"]["ssh"].update(host="192.0.2.15 -oProxyCommand=x"),
     "gpuhosts:host.ssh.host", "neither an IP address nor a DNS name"),
    ("ssh user with a semicolon", lambda v: v["host"]["ssh"].update(user="root;id"),
     "gpuhosts:host.ssh.user", "is not a user name"),
]

TRAINER_CASES = [
    ("checkpoints climbing", lambda v: training(v).update(checkpoints="../../etc", deleteCheckpointsOnDestroy=True),
     "gpuhosts:training.checkpoints", "not an absolute path"),
    ("checkpoints are the storage", lambda v: training(v).update(checkpoints="/data", deleteCheckpointsOnDestroy=True),
     "gpuhosts:training.checkpoints", "holds"),
    ("checkpoints hold the models", lambda v: training(v).update(checkpoints="/data/models"),
     "gpuhosts:training.checkpoints", "holds /data/models/"),
    ("checkpoints outside the storage", lambda v: training(v).update(checkpoints="/srv/ckpt"),
     "gpuhosts:training.checkpoints", "outside node.storage"),
    ("percent and newline in checkpoints", lambda v: training(v).update(checkpoints="/data/c%h\nExecStartPre=/x"),
     "gpuhosts:training", "control character"),
    ("monitor bind localhost", lambda v: training(v)["monitor"].update(bind="localhost"),
     "gpuhosts:training.monitor.bind", "write 127.0.0.1"),
    ("monitor on the server's port", lambda v: training(v)["monitor"].update(port=training(v)["server"].get("port", 8000)),
     "gpuhosts:training.monitor.port", "hidden-state server's port"),
    ("storage in /etc", lambda v: v["node"].update(storage="/etc/data"), "gpuhosts:node.storage", "belongs to the system"),
]


def refused(validate, values, secrets, path, words):
    with pytest.raises(ConfigError) as caught:
        validate(values, secrets)
    matching = [p for p in caught.value.problems if p.path == path or p.path.startswith(path + ".")
                or p.path.startswith(path + "[")]
    assert matching, f"no problem at {path}: {caught.value}"
    assert any(words in p.message for p in matching), str(caught.value)


@pytest.mark.parametrize("what, change, path, words", KPRO5_CASES, ids=[c[0] for c in KPRO5_CASES])
def test_a_hostile_kpro5_value_is_refused_naming_the_field(what, change, path, words):
    values = kpro5_values()
    change(values)
    refused(validate_stack, values, KPRO5_SECRETS, path, words)


@pytest.mark.parametrize("what, change, path, words", TRAINER_CASES, ids=[c[0] for c in TRAINER_CASES])
def test_a_hostile_trainer_value_is_refused_naming_the_field(what, change, path, words):
    values = trainer_values()
    change(values)
    refused(validate_trainer_stack, values, TRAINER_SECRETS, path, words)


def test_the_stacks_themselves_pass():
    validate_stack(kpro5_values(), KPRO5_SECRETS)
    validate_trainer_stack(trainer_values(), TRAINER_SECRETS)
