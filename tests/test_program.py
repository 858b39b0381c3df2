"""The real __main__.py of the kpro5 and trainer stacks under Pulumi's mock runtime: one host unit per planned unit,
of its kind's type, under its group's component, what it waits for, its inputs, its alias, and secrets."""

from __future__ import annotations

import json

import pytest

from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from conftest import KPRO5_SECRETS, TRAINER_SECRETS, trainer_values, PROJECT, kpro5_values
from gpuhosts.stacks import validate_stack
from gpuhosts.plan import SECRET, SECRET_PLACEHOLDER, is_host_unit, read_stack_file, run_program
from gpuhosts.provider import secret_digest
from gpuhosts.stacks import validate_trainer_stack

# The waits a reviewer relies on, per unit of the committed kpro5 stack; the units themselves come from the plan,
# so a unit the plan adds needs no entry here (its waits are then checked against its needs alone).
UNITS = {
    # unit (the resource's name): (kind, the units it waits for)
    "vfio-binding": ("VfioBinding", []),
    "nvidia-driver": ("NvidiaDriver", ["vfio-binding"]),
    "nvidia-uvm-at-boot": ("NvidiaDeviceNodes", ["nvidia-driver"]),
    "ct129-gpu-devices": ("LxcGpuPassthrough", ["nvidia-uvm-at-boot"]),
    "ct129-nvidia-userspace": ("ContainerUserspace", ["ct129-gpu-devices"]),
    # Environments and downloads wait only for the container's last restart, not for its NVIDIA user space.
    "ct129-env-qwen-sglang": ("PythonEnv", ["ct129-gpu-devices"]),
    "ct129-env-qwen-vllm-dflash": ("PythonEnv", ["ct129-gpu-devices"]),
    "ct129-model-qwen3-6-27b": ("ModelDownload", ["ct129-gpu-devices"]),
    "ct129-model-qwen3-6-27b-dflash": ("ModelDownload", ["ct129-gpu-devices"]),
    # The stopped vLLM service shares the GPUs: it lets go of them before SGLang starts.
    "ct129-service-qwen-vllm-dflash": ("InferenceService", [
        "ct129-env-qwen-vllm-dflash", "ct129-model-qwen3-6-27b", "ct129-model-qwen3-6-27b-dflash",
        "ct129-nvidia-userspace"]),
    "ct129-service-qwen-sglang": ("InferenceService", [
        "ct129-env-qwen-sglang", "ct129-model-qwen3-6-27b", "ct129-nvidia-userspace", "ct129-service-qwen-vllm-dflash"]),
    "ct129-gate-qwen-sglang": ("DeployGate", ["ct129-service-qwen-sglang"]),
    # The DDTree reference's checkout waits only for the devices; the bake-off for every service it stops and
    # starts, the gate, the checkout, the reference's own environment and its drafter.
    "ct129-ddtree-spec-bakeoff": ("DDTreeCheckout", ["ct129-gpu-devices"]),
    "ct129-bench-spec-bakeoff": ("Benchmark", [
        "ct129-service-qwen-sglang", "ct129-service-qwen-vllm-dflash", "ct129-gate-qwen-sglang",
        "ct129-ddtree-spec-bakeoff", "ct129-env-ddtree-spec-bakeoff", "ct129-model-qwen3-6-27b-dflash"]),
}
# The units that receive a secret on stdin, and which.
STDIN = {"ct129-model-qwen3-6-27b-dflash": "hfToken", "ct129-service-qwen-sglang": "llmApiKey",
         "ct129-service-qwen-vllm-dflash": "llmApiKey"}


@pytest.fixture(scope="module")
def run():
    return run_program(PROJECT, "kpro5", kpro5_values(benchmarks=True), KPRO5_SECRETS)


def by_name(run, name, type_=None):
    found = [r for r in run.resources if r.name == name and (type_ is None or r.type == type_)]
    assert len(found) == 1, f"{name}: {[r.urn for r in found]}"
    return found[0]


def host_units(run) -> dict:
    return {r.name: r for r in run.resources if is_host_unit(r.type)}


def groups_above(run, resource) -> list[tuple[str, str]]:
    """The components between a resource and the root component, outermost first, as (kind, name)."""
    by_urn = {r.urn: r for r in run.resources}
    found = []
    parent = by_urn[resource.parent]
    while parent.parent in by_urn:
        found.append((parent.type.rsplit(":", 1)[-1], parent.name))
        parent = by_urn[parent.parent]
    return found[::-1]


def assert_tree(run, graph, root, module: str) -> None:
    """Each unit is a resource of its kind's type under the components of its group, each component of type
    gpuhosts:<module>:<kind> under its own parent, and the root holds them all."""
    units = host_units(run)
    assert sorted(units) == sorted(graph.units)
    for unit in graph:
        resource = units[unit.key]
        assert resource.type == f"pulumi-python:dynamic/gpuhosts:{unit.kind}", resource.urn
        assert groups_above(run, resource) == list(unit.group), resource.urn
    components = [r for r in run.resources if not is_host_unit(r.type) and r is not root and r.type != GPU]
    assert sorted((r.type, r.name) for r in components) == sorted(
        (f"gpuhosts:{module}:{path[-1][0]}", path[-1][1]) for path in graph.components())
    assert all(groups_above(run, r) + [(r.type.rsplit(":", 1)[-1], r.name)] in [list(p) for p in graph.components()]
               for r in components)


GPU = "gpuhosts:host:Gpu"


def test_each_gpu_is_a_resource_under_its_host_saying_where_it_goes(run):
    host = by_name(run, "kpro5", "gpuhosts:host:ProxmoxHost")
    gpus = {r.name: r for r in run.resources if r.type == GPU}
    assert sorted(gpus) == ["0000:01:00.0", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0"]
    assert all(r.parent == host.urn for r in gpus.values())


def test_one_component_per_host_and_every_unit_in_the_tree_the_plan_declares(run):
    host = by_name(run, "kpro5", "gpuhosts:host:ProxmoxHost")
    assert host.parent.endswith("pulumi:pulumi:Stack::gpuhosts-kpro5"), host.urn
    graph = plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))
    assert_tree(run, graph, host, "host")
    # A service holds its environment, engine and gate and the weights only it reads; shared weights stay with the
    # container, the host's own units with the host.
    # The drafter the vLLM service and the bake-off's DDTree reference both read is the container's; a stack
    # converged when it was the service's keeps it through an alias to that parent.
    drafter = host_units(run)["ct129-model-qwen3-6-27b-dflash"]
    assert groups_above(run, drafter) == [("LxcContainer", "ct129")]
    service = by_name(run, "qwen-vllm-dflash", "gpuhosts:host:InferenceServiceStack")
    assert f"{service.urn.rsplit('::', 1)[0]}$pulumi-python:dynamic/gpuhosts:ModelDownload::" \
           f"ct129-model-qwen3-6-27b-dflash" in drafter.aliases, drafter.aliases
    assert groups_above(run, host_units(run)["ct129-model-qwen3-6-27b"]) == [("LxcContainer", "ct129")]
    assert groups_above(run, host_units(run)["vfio-binding"]) == []
    assert host_units(run)["vfio-binding"].type == "pulumi-python:dynamic/gpuhosts:VfioBinding"


def test_every_unit_carries_an_alias_to_the_urn_it_had_directly_under_the_host(run):
    for name, resource in host_units(run).items():
        assert resource.aliases[0] == (
            f"urn:pulumi:kpro5::gpuhosts::gpuhosts:host:ProxmoxHost$pulumi-python:dynamic:Resource::{name}"), name
    # and the units a release moved, one alias more each: where they stood before it
    assert {name: r.aliases[1:] for name, r in host_units(run).items() if r.aliases[1:]} == {
        "nvidia-uvm-at-boot": ["urn:pulumi:kpro5::gpuhosts::gpuhosts:host:ProxmoxHost$"
                               "pulumi-python:dynamic/gpuhosts:LxcGpuPassthrough::nvidia-uvm-at-boot"],
        "ct129-model-qwen3-6-27b-dflash": ["urn:pulumi:kpro5::gpuhosts::gpuhosts:host:ProxmoxHost$"
                                           "gpuhosts:host:LxcContainer$gpuhosts:host:InferenceServiceStack$"
                                           "pulumi-python:dynamic/gpuhosts:ModelDownload::"
                                           "ct129-model-qwen3-6-27b-dflash"]}
    assert all(r.aliases == [] for r in run.resources if not is_host_unit(r.type))


def test_a_unit_kind_is_a_resource_type_of_its_own_without_a_class_written_for_it():
    from components.host_units import HostUnit, unit_type

    made = unit_type("SomeFutureKind")
    assert issubclass(made, HostUnit) and unit_type("SomeFutureKind") is made
    assert made._resource_type_name == "dynamic/gpuhosts:SomeFutureKind"


def test_the_components_users_read_offer_typed_outputs(run):
    outputs = {next(r.name for r in run.resources if r.urn == urn): values
               for urn, values in run.component_outputs.items()}
    assert outputs["qwen-sglang"] == {"listen": "0.0.0.0:30000"}  # the gate's report is unknown until it has run
    assert outputs["spec-bakeoff"] == {"results": "/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff"}
    trainer = run_program(PROJECT, "trainer", trainer_values(), TRAINER_SECRETS)
    (job,) = [values for urn, values in trainer.component_outputs.items() if "TrainingJobStack" in urn]
    assert job == {"checkpoints": "/data/checkpoints/Qwen3.6-27B-DFlash",
                   "log": "/data/checkpoints/Qwen3.6-27B-DFlash/train.log",
                   "dataset": "/data/data/qwen36-mix-913k/tokenized"}


def test_units_their_kinds_and_what_each_waits_for(run):
    units = host_units(run)
    graph = plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))
    assert sorted(units) == sorted(graph.units)
    for name, unit in units.items():
        assert (unit.inputs["unit"], unit.type) == (name, f"pulumi-python:dynamic/gpuhosts:{graph[name].kind}"), \
            unit.urn
        assert "kind" not in unit.inputs, "a kind is the resource's type; as an input a renamed kind would update"
        assert unit.dependencies == sorted(units[w].urn for w in graph[name].needs), unit.urn
    for name, (kind, waits) in UNITS.items():
        assert (graph[name].kind, sorted(graph[name].needs)) == (kind, sorted(waits)), name


def test_every_unit_carries_its_scripts_and_the_facts_the_plan_desires(run):
    graph = plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))
    for name, resource in host_units(run).items():
        unit = graph[name]
        for script in ("ensure", "teardown", "probe"):
            assert resource.inputs[script] == getattr(unit, script), f"{resource.urn} {script}"
            assert resource.inputs[script].startswith("# managed by gpuhosts"), f"{resource.urn} {script}"
        assert resource.inputs["facts"] == unit.desired, resource.urn
    assert host_units(run)["ct129-gpu-devices"].inputs["facts"]["device /dev/nvidia-uvm"] == "passed"


def test_the_target_holds_no_secret_and_stdin_secrets_only_as_secret_digests(run):
    for resource in host_units(run).values():
        # The host's name is no input: renaming the host must not touch its units.
        assert resource.inputs["host"] == {"address": "192.0.2.15", "port": 22, "user": "root",
                                           "hostKey": resource.inputs["host"]["hostKey"]}, resource.urn
        assert resource.inputs["host"]["hostKey"].startswith("ssh-ed25519 "), resource.urn
        assert resource.inputs.get("secret") == (SECRET if resource.name in STDIN else None), resource.urn
    assert SECRET_PLACEHOLDER not in json.dumps([r.inputs for r in run.resources])


def test_a_units_secret_input_names_its_key_and_a_digest_that_follows_the_value():
    def secret_inputs(api_key: str) -> dict:
        values = {**kpro5_values(benchmarks=True), "hfToken": "hf_ProgramTestToken0042", "llmApiKey": api_key}
        run = run_program(PROJECT, "kpro5", values, KPRO5_SECRETS, reveal_secrets=True)
        return {name: r.inputs.get("secret") for name, r in host_units(run).items() if r.inputs.get("secret")}

    first, rotated = secret_inputs("sk-program-test-key-0042"), secret_inputs("sk-program-test-key-0043")
    assert {name: inputs["name"] for name, inputs in first.items()} == STDIN
    assert first["ct129-service-qwen-sglang"]["digest"] == secret_digest("ct129-service-qwen-sglang",
                                                                         "sk-program-test-key-0042")
    # A rotated key changes the inputs of the units that receive it, and only theirs; no value is in any input.
    assert {n for n in first if first[n] != rotated[n]} == {"ct129-service-qwen-sglang", "ct129-service-qwen-vllm-dflash"}
    assert "sk-program-test-key-004" not in json.dumps([first, rotated])


def test_stack_outputs(run):
    desired = run.outputs["desired"]
    assert desired["vfio"] == ["0000:01:00.0", "0000:21:00.0"]
    assert desired["containers"]["129"]["gpus"] == ["0000:41:00.0", "0000:61:00.0"]
    assert run.outputs["rebootRequired"] is False


def test_allow_reboot_adds_one_reboot_unit_between_the_host_units_and_the_containers():
    values = kpro5_values(benchmarks=True)
    values["host"]["allowReboot"] = True
    units = host_units(run_program(PROJECT, "kpro5", values, KPRO5_SECRETS))
    reboot = units["reboot"]
    assert reboot.type == "pulumi-python:dynamic/gpuhosts:HostReboot"
    graph = plan_host(validate_stack(values, KPRO5_SECRETS))
    assert reboot.dependencies == sorted(units[need].urn for need in graph["reboot"].needs)
    assert {units["vfio-binding"].urn, units["nvidia-driver"].urn} <= set(reboot.dependencies)
    assert units["nvidia-uvm-at-boot"].dependencies == [reboot.urn]
    assert reboot.inputs["facts"] == {"reboot pending": "no"}
    graph = plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))
    assert sorted(units) == sorted([*graph.units, "reboot"])


def test_invalid_config_stops_the_program_before_any_resource():
    import pulumi

    values = kpro5_values(benchmarks=True)
    values["gpus"][0]["address"] = "1:00.0"
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:gpus\[0\]\.address"):
        run_program(PROJECT, "kpro5", values, KPRO5_SECRETS)


def test_services_output_names_each_service_and_its_gate():
    services = run_program(PROJECT, "kpro5", kpro5_values(benchmarks=True), KPRO5_SECRETS).outputs["services"]
    assert services["qwen-sglang"] == {"container": 129, "enabled": True, "port": 30000,
                                       "unit": "gpuhosts-qwen-sglang.service", "listen": "0.0.0.0:30000",
                                       "lastPassedGate": None}
    assert services["qwen-vllm-dflash"]["enabled"] is False and services["qwen-vllm-dflash"]["lastPassedGate"] is None


def test_secret_values_reach_commands_only_as_secret_stdin():
    values = {**kpro5_values(benchmarks=True), "hfToken": "hf_ProgramTestToken0042", "llmApiKey": "sk-program-test-key-0042",
              "sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY----- program-test"}
    run = run_program(PROJECT, "kpro5", values, KPRO5_SECRETS)
    recorded = json.dumps([r.inputs for r in run.resources]) + json.dumps(run.outputs, default=str)
    for value in ("hf_ProgramTestToken0042", "sk-program-test-key-0042", "program-test"):
        assert value not in recorded


def test_an_api_key_set_without_secret_stops_the_program():
    import pulumi

    values = {**kpro5_values(benchmarks=True), "llmApiKey": "sk-plain-program-key"}
    # The program reads every gpuhosts key, so it sees the plain-text value as the plan does.
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:llmApiKey: holds a secret as plain text; remove it and run "
                                              r"`pulumi config set --secret gpuhosts:llmApiKey`") as caught:
        run_program(PROJECT, "kpro5", values, KPRO5_SECRETS - {"llmApiKey"})
    assert "sk-plain-program-key" not in str(caught.value)


# The waits a reviewer relies on, per unit of the committed trainer stack (the units come from the plan).
TRAINER_UNITS = {
    # unit: what it waits for
    "preflight": [],
    "env-speculators": ["preflight"],
    "env-vllm": ["preflight"],
    "env-monitor": ["preflight"],
    # A download brings its own hf: it waits for no environment.
    "model-qwen3-6-27b": ["preflight"],
    "model-qwen3-6-27b-dflash": ["preflight"],
    # The declared mix is converted and tokenized with speculators' environment and the verifier's chat template.
    "dataset-qwen36-mix-913k": ["env-speculators", "model-qwen3-6-27b", "preflight"],
    # z-lab's checkpoint becomes a speculators one; the check of its config.json needs the verifier's too.
    "drafter-convert": ["env-speculators", "model-qwen3-6-27b", "model-qwen3-6-27b-dflash"],
    "hidden-state-server": ["env-speculators", "env-vllm", "model-qwen3-6-27b"],
    "hidden-state-check": ["hidden-state-server"],
    "dflash-training": ["dataset-qwen36-mix-913k", "drafter-convert", "env-speculators", "hidden-state-check"],
    # The monitor only reads the training's log and checkpoints.
    "training-monitor": ["env-monitor"],
}


def test_the_trainer_stack_runs_under_mocks():
    run = run_program(PROJECT, "trainer", trainer_values(), TRAINER_SECRETS)
    node = by_name(run, "trainer", "gpuhosts:training:TrainingNode")
    assert node.parent.endswith("pulumi:pulumi:Stack::gpuhosts-trainer")
    units = host_units(run)
    graph = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph
    assert sorted(units) == sorted(graph.units)
    assert_tree(run, graph, node, "training")
    for name, waits in TRAINER_UNITS.items():
        assert sorted(graph[name].needs) == sorted(waits), name
    for name in graph.units:
        assert units[name].dependencies == sorted(units[w].urn for w in graph[name].needs), name
        assert units[name].inputs["facts"] == graph[name].desired, name
        assert set(units[name].inputs["host"]) == {"address", "port", "user", "hostKey"}, name
        assert units[name].inputs.get("secret") == (SECRET if name == "model-qwen3-6-27b-dflash" else None), name
    training = run.outputs["desired"]["training"]
    assert training["layerIds"]["serverExtracts"] == [2, 17, 32, 47, 62, 64]
    assert training["gpus"]["server"] == [0, 1, 2, 3] and training["gpus"]["training"] == [4, 5, 6, 7]


def test_an_invalid_trainer_stack_stops_the_program():
    import pulumi

    values = trainer_values()
    values["training"]["trainingGpus"] = [0, 1, 2, 3]
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:training\.trainingGpus: GPU\(s\) \[0, 1, 2, 3\] are also"):
        run_program(PROJECT, "trainer", values, TRAINER_SECRETS)


@pytest.mark.parametrize("key", ["gpuhost:services", "gpuhost:host", "GPUHOSTS:gpus"])
def test_a_misspelt_namespace_stops_the_program_naming_the_intended_key(key):
    import pulumi

    values = kpro5_values(benchmarks=True)
    section = key.split(":", 1)[1]
    run_values = {k: v for k, v in values.items() if k != section}
    with pytest.raises(pulumi.RunError, match=rf"{key}: namespace .* is not 'gpuhosts'; did you mean gpuhosts:{section}\?"):
        run_program(PROJECT, "kpro5", run_values, KPRO5_SECRETS, extra_config={key: values[section]})


def test_an_unknown_gpuhosts_key_stops_the_program():
    import pulumi

    values = {**kpro5_values(benchmarks=True), "service": [{"name": "x"}]}
    with pytest.raises(pulumi.RunError, match=r"gpuhosts:service: is not a gpuhosts setting; did you mean gpuhosts:services\?"):
        run_program(PROJECT, "kpro5", values, KPRO5_SECRETS)


# Every committed stack, with the secrets `pulumi config set --secret` gives it: (kind, secrets).
COMMITTED_STACKS = {
    "kpro5": ("proxmox", KPRO5_SECRETS),
    "kpro6": ("proxmox", frozenset({"sshPrivateKey", "llmApiKey"})),
    "trainer": ("trainer", TRAINER_SECRETS),
}


def test_the_table_names_every_stack_file():
    assert sorted(p.name for p in (PROJECT / "stacks").glob("Pulumi.*.yaml")) == sorted(
        f"Pulumi.{stack}.yaml" for stack in COMMITTED_STACKS)


@pytest.mark.parametrize("stack", sorted(COMMITTED_STACKS))
def test_every_committed_stack_runs_under_mocks_one_resource_per_planned_unit(stack):
    kind, secrets = COMMITTED_STACKS[stack]
    values, _secure = read_stack_file(PROJECT / "stacks" / f"Pulumi.{stack}.yaml")
    run = run_program(PROJECT, stack, values, secrets)
    if kind == "proxmox":
        graph = plan_host(validate_stack(values, secrets))
        name, type_ = values["host"]["name"], "gpuhosts:host:ProxmoxHost"
    else:
        graph = plan_training_node(validate_trainer_stack(values, secrets)).graph
        name, type_ = values["node"]["name"], "gpuhosts:training:TrainingNode"
    component = by_name(run, name, type_)
    assert component.parent.endswith(f"pulumi:pulumi:Stack::gpuhosts-{stack}"), component.urn
    assert_tree(run, graph, component, "host" if kind == "proxmox" else "training")
    units = host_units(run)
    for unit in graph.apply_order:
        resource = units[unit.key]
        assert resource.urn.startswith(component.urn.rsplit("::", 1)[0] + "$"), resource.urn
        assert resource.inputs["facts"] == unit.desired, resource.urn
        assert resource.dependencies == sorted(units[need].urn for need in unit.needs), resource.urn


def test_the_stack_exports_each_benchmark_with_where_its_results_are(run):
    (name, bench), = run.outputs["benchmarks"].items()
    assert name == "spec-bakeoff" and bench["container"] == 129
    assert bench["results"] == "/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff"
