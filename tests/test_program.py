"""The real __main__.py of the kpro5 stack under Pulumi's mock runtime: resources, parents, dependencies, secrets."""

from __future__ import annotations

import json

import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, trainer_values, PROJECT, kpro5_values
from gpuhosts.plan import SECRET, SECRET_PLACEHOLDER, run_program

EXPECTED = {
    # name: (type, parent name)
    "kpro5": ("gpuhosts:host:ProxmoxHost", None),
    "kpro5-nvidia-driver": ("gpuhosts:host:NvidiaDriver", "kpro5"),
    "kpro5-vfio-binding": ("gpuhosts:host:VfioBinding", "kpro5"),
    "kpro5-lxc-gpu-passthrough": ("gpuhosts:host:LxcGpuPassthrough", "kpro5"),
    "kpro5-ct129-userspace": ("gpuhosts:host:ContainerUserspace", "kpro5"),
    "kpro5-ct129-services": ("gpuhosts:service:ContainerServices", "kpro5"),
    "kpro5-ct129-services-env-qwen-sglang": ("gpuhosts:service:PythonEnv", "kpro5-ct129-services"),
    "kpro5-ct129-services-env-qwen-vllm-dflash": ("gpuhosts:service:PythonEnv", "kpro5-ct129-services"),
    "kpro5-ct129-services-model-qwen3-6-27b": ("gpuhosts:service:ModelDownload", "kpro5-ct129-services"),
    "kpro5-ct129-services-model-qwen3-6-27b-dflash": ("gpuhosts:service:ModelDownload", "kpro5-ct129-services"),
    "kpro5-ct129-services-qwen-sglang": ("gpuhosts:service:InferenceService", "kpro5-ct129-services"),
    "kpro5-ct129-services-qwen-vllm-dflash": ("gpuhosts:service:InferenceService", "kpro5-ct129-services"),
    "kpro5-ct129-services-gate-qwen-sglang": ("gpuhosts:service:DeployGate", "kpro5-ct129-services"),
}
COMMANDS = {
    # command name: (parent component, component or command it must wait for)
    "kpro5-vfio-binding": ("kpro5-vfio-binding", None),
    "kpro5-nvidia-driver": ("kpro5-nvidia-driver", "kpro5-vfio-binding"),
    "kpro5-nvidia-uvm-at-boot": ("kpro5-lxc-gpu-passthrough", "kpro5-nvidia-driver"),
    "kpro5-ct129-gpu-devices": ("kpro5-lxc-gpu-passthrough", "kpro5-nvidia-uvm-at-boot"),
    "kpro5-ct129-nvidia-userspace": ("kpro5-ct129-userspace", "kpro5-ct129-gpu-devices"),
    "kpro5-ct129-env-qwen-sglang": ("kpro5-ct129-services-env-qwen-sglang", "kpro5-ct129-nvidia-userspace"),
    "kpro5-ct129-env-qwen-vllm-dflash": ("kpro5-ct129-services-env-qwen-vllm-dflash", "kpro5-ct129-nvidia-userspace"),
    "kpro5-ct129-model-qwen3-6-27b": ("kpro5-ct129-services-model-qwen3-6-27b", "kpro5-ct129-env-qwen-sglang"),
    "kpro5-ct129-model-qwen3-6-27b-dflash": ("kpro5-ct129-services-model-qwen3-6-27b-dflash",
                                             "kpro5-ct129-env-qwen-vllm-dflash"),
    # The stopped vLLM service shares the GPUs: it lets go of them before SGLang starts.
    "kpro5-ct129-service-qwen-vllm-dflash": ("kpro5-ct129-services-qwen-vllm-dflash", [
        "kpro5-ct129-env-qwen-vllm-dflash", "kpro5-ct129-model-qwen3-6-27b", "kpro5-ct129-model-qwen3-6-27b-dflash"]),
    "kpro5-ct129-service-qwen-sglang": ("kpro5-ct129-services-qwen-sglang", [
        "kpro5-ct129-env-qwen-sglang", "kpro5-ct129-model-qwen3-6-27b", "kpro5-ct129-service-qwen-vllm-dflash"]),
    "kpro5-ct129-gate-qwen-sglang": ("kpro5-ct129-services-gate-qwen-sglang", "kpro5-ct129-service-qwen-sglang"),
}
# The commands that receive a secret on stdin, and which.
STDIN = {"kpro5-ct129-model-qwen3-6-27b-dflash", "kpro5-ct129-service-qwen-sglang", "kpro5-ct129-service-qwen-vllm-dflash"}


@pytest.fixture(scope="module")
def run():
    return run_program(PROJECT, "kpro5", kpro5_values(), KPRO5_SECRETS)


def by_name(run, name, type_=None):
    found = [r for r in run.resources if r.name == name and (type_ is None or r.type == type_)]
    assert len(found) == 1, f"{name}: {[r.urn for r in found]}"
    return found[0]


def test_components_and_their_parents(run):
    for name, (type_, parent) in EXPECTED.items():
        resource = by_name(run, name, type_)
        if parent is None:
            assert resource.parent.endswith("pulumi:pulumi:Stack::gpuhosts-kpro5"), resource.urn
        else:
            assert resource.parent == by_name(run, parent, EXPECTED[parent][0]).urn, resource.urn


def test_commands_parents_and_dependencies(run):
    commands = [r for r in run.resources if r.type == "command:remote:Command"]
    assert sorted(r.name for r in commands) == sorted(COMMANDS)
    for name, (parent, waits_for) in COMMANDS.items():
        command = by_name(run, name, "command:remote:Command")
        assert command.parent == by_name(run, parent, EXPECTED[parent][0]).urn, command.urn
        if waits_for is None:
            assert command.dependencies == [], command.urn
        else:
            waits = [waits_for] if isinstance(waits_for, str) else waits_for
            assert command.dependencies == sorted(by_name(run, w, "command:remote:Command").urn for w in waits), command.urn


def test_every_command_has_a_teardown_and_no_ssh_environment(run):
    for command in (r for r in run.resources if r.type == "command:remote:Command"):
        assert command.inputs["create"].startswith("# managed by gpuhosts"), command.urn
        assert command.inputs["delete"].startswith("# managed by gpuhosts"), command.urn
        assert command.inputs["addPreviousOutputInEnv"] is False, command.urn
        assert "environment" not in command.inputs, command.urn


def test_the_ssh_connection_and_stdin_stay_secret(run):
    for command in (r for r in run.resources if r.type == "command:remote:Command"):
        assert command.inputs["connection"] == SECRET, command.urn
        assert command.inputs.get("stdin") == (SECRET if command.name in STDIN else None), command.urn
    assert SECRET_PLACEHOLDER not in json.dumps([r.inputs for r in run.resources])


def test_stack_outputs(run):
    desired = run.outputs["desired"]
    assert desired["vfio"] == ["0000:01:00.0", "0000:21:00.0"]
    assert desired["containers"]["129"]["gpus"] == ["0000:41:00.0", "0000:61:00.0"]
    assert run.outputs["rebootRequired"] is False


def test_allow_reboot_adds_a_waited_reboot_before_the_containers():
    values = kpro5_values()
    values["host"]["allowReboot"] = True
    run = run_program(PROJECT, "kpro5", values, KPRO5_SECRETS)
    wait = by_name(run, "kpro5-reboot-wait", "command:remote:Command")
    reboot = by_name(run, "kpro5-reboot", "command:remote:Command")
    settle = by_name(run, "kpro5-reboot-settle", "command:local:Command")
    assert settle.dependencies == [reboot.urn]
    assert sorted(wait.dependencies) == sorted([settle.urn, reboot.urn])
    assert reboot.dependencies == [by_name(run, "kpro5-nvidia-driver", "command:remote:Command").urn]
    assert len(reboot.inputs["triggers"]) == 2
    passthrough = by_name(run, "kpro5-lxc-gpu-passthrough", "gpuhosts:host:LxcGpuPassthrough")
    uvm = by_name(run, "kpro5-nvidia-uvm-at-boot", "command:remote:Command")
    assert uvm.dependencies == [wait.urn] and uvm.parent == passthrough.urn


def test_invalid_config_stops_the_program_before_any_resource():
    import pulumi

    values = kpro5_values()
    values["gpus"][0]["address"] = "1:00.0"
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:gpus\[0\]\.address"):
        run_program(PROJECT, "kpro5", values, KPRO5_SECRETS)


def test_services_output_names_each_service_and_its_gate():
    services = run_program(PROJECT, "kpro5", kpro5_values(), KPRO5_SECRETS).outputs["services"]
    assert services["qwen-sglang"] == {"container": 129, "enabled": True, "port": 30000,
                                       "unit": "gpuhosts-qwen-sglang.service", "gate": None}
    assert services["qwen-vllm-dflash"]["enabled"] is False and services["qwen-vllm-dflash"]["gate"] is None


def test_secret_values_reach_commands_only_as_secret_stdin():
    values = {**kpro5_values(), "hfToken": "hf_ProgramTestToken0042", "llmApiKey": "sk-program-test-key-0042",
              "sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY----- program-test"}
    run = run_program(PROJECT, "kpro5", values, KPRO5_SECRETS)
    recorded = json.dumps([r.inputs for r in run.resources]) + json.dumps(run.outputs, default=str)
    for value in ("hf_ProgramTestToken0042", "sk-program-test-key-0042", "program-test"):
        assert value not in recorded


def test_an_api_key_set_without_secret_stops_the_program():
    import pulumi

    values = {**kpro5_values(), "llmApiKey": "sk-plain-program-key"}
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:services\[0\]\.apiKeySecret: gpuhosts:llmApiKey is not a "
                                              r"secret of this stack") as caught:
        run_program(PROJECT, "kpro5", values, KPRO5_SECRETS - {"llmApiKey"})
    assert "sk-plain-program-key" not in str(caught.value)


TRAINER_COMMANDS = {
    # command: what it waits for
    "trainer-preflight": [],
    "trainer-env-speculators": ["trainer-preflight"],
    "trainer-env-vllm": ["trainer-preflight"],
    "trainer-env-monitor": ["trainer-preflight"],
    "trainer-model-qwen3-6-27b": ["trainer-env-speculators"],
    "trainer-model-qwen3-6-27b-dflash": ["trainer-env-speculators"],
    "trainer-dataset-qwen36-mix-913k": ["trainer-preflight"],
    "trainer-hidden-state-server": ["trainer-env-speculators", "trainer-env-vllm", "trainer-model-qwen3-6-27b"],
    "trainer-hidden-state-check": ["trainer-hidden-state-server"],
    "trainer-dflash-training": ["trainer-dataset-qwen36-mix-913k", "trainer-hidden-state-check",
                                "trainer-model-qwen3-6-27b-dflash"],
    "trainer-training-monitor": ["trainer-dflash-training", "trainer-env-monitor"],
}


def test_the_trainer_stack_runs_under_mocks():
    run = run_program(PROJECT, "trainer", trainer_values(), TRAINER_SECRETS)
    node = by_name(run, "trainer", "gpuhosts:training:TrainingNode")
    assert node.parent.endswith("pulumi:pulumi:Stack::gpuhosts-trainer")
    commands = {r.name: r for r in run.resources if r.type == "command:remote:Command"}
    assert sorted(commands) == sorted(TRAINER_COMMANDS)
    urn = {name: r.urn for name, r in commands.items()}
    for name, waits in TRAINER_COMMANDS.items():
        assert commands[name].dependencies == sorted(urn[w] for w in waits), name
        parent = next(r for r in run.resources if r.urn == commands[name].parent)
        assert parent.type.startswith("gpuhosts:training:") and parent.parent == node.urn, name
        assert commands[name].inputs["connection"] == SECRET
    assert commands["trainer-model-qwen3-6-27b-dflash"].inputs["stdin"] == SECRET
    training = run.outputs["desired"]["training"]
    assert training["layerIds"]["serverExtracts"] == [2, 17, 32, 47, 62, 64]
    assert training["gpus"]["server"] == [0, 1, 2, 3] and training["gpus"]["training"] == [4, 5, 6, 7]


def test_an_invalid_trainer_stack_stops_the_program():
    import pulumi

    values = trainer_values()
    values["training"]["trainingGpus"] = [0, 1, 2, 3]
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:training\.trainingGpus: GPU\(s\) \[0, 1, 2, 3\] are also"):
        run_program(PROJECT, "trainer", values, TRAINER_SECRETS)
