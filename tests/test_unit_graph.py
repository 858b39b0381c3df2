"""The unit graph (gpuhosts/units.py): needs are checked, the orders follow from them, and the kpro5 and trainer
plans need what they truly need — a download waits for no GPU driver, an engine environment for no download."""

from __future__ import annotations

import pytest

from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.stacks import validate_stack
from gpuhosts.stacks import validate_trainer_stack
from gpuhosts.units import GraphError, Group, Report, Unit, UnitGraph, within


def unit(key: str, *needs: str) -> Unit:
    return Unit(key=key, kind="Test", ensure=f"# ensure {key}", teardown=f"# teardown {key}", probe=f"# probe {key}",
                needs=needs)


def closure(graph: UnitGraph, key: str) -> set[str]:
    """Every unit `key` waits for, directly or through the units it needs."""
    found: set[str] = set()
    todo = list(graph[key].needs)
    while todo:
        need = todo.pop()
        if need not in found:
            found.add(need)
            todo.extend(graph[need].needs)
    return found


@pytest.mark.parametrize("units, words", [
    ([unit("a"), unit("b", "a", "ghost")], "unit b needs ghost, which the plan does not have"),
    # A cycle names the units in it, not the free ones declared beside it.
    ([unit("free"), unit("a", "c"), unit("b", "a"), unit("c", "b"), unit("after", "free")], "a cycle: a → b → c"),
    ([unit("a", "a")], "a cycle: a"),
    ([unit("a"), unit("a")], "two units are called a"),
], ids=["unknown need", "cycle", "self need", "duplicate key"])
def test_a_bad_graph_is_refused_naming_the_units(units, words):
    with pytest.raises(GraphError) as caught:
        UnitGraph(units)
    assert str(caught.value).endswith(words), str(caught.value)


@pytest.mark.parametrize("key", ["Host-Unit", "kpro5_unit", "", "-lead", "a" * 64])
def test_a_key_that_cannot_name_a_resource_is_refused(key):
    with pytest.raises(GraphError, match="is not lower-case letters"):
        unit(key)


def test_orders_and_waves_follow_the_needs_and_keep_declaration_order_among_equals():
    graph = UnitGraph([unit("service", "env", "weights"), unit("env", "devices"), unit("weights"),
                       unit("devices"), unit("gate", "service")])
    assert [u.key for u in graph] == ["weights", "devices", "env", "service", "gate"]
    assert [u.key for u in graph.apply_order] == [u.key for u in graph]
    assert [u.key for u in graph.teardown_order] == ["gate", "service", "env", "devices", "weights"]
    assert graph.waves() == [["weights", "devices"], ["env"], ["service"], ["gate"]]
    assert graph.needed_by("env") == ["service"] and graph.needed_by("gate") == []
    for index, wave in enumerate(graph.waves()):
        earlier = {key for w in graph.waves()[:index] for key in w}
        assert all(set(graph[key].needs) <= earlier for key in wave), wave


def test_an_empty_graph_has_no_waves():
    assert UnitGraph([]).waves() == [] and list(UnitGraph([])) == []


def kpro5_graph(mutate=None) -> UnitGraph:
    values = kpro5_values()
    if mutate is not None:
        mutate(values)
    return plan_host(validate_stack(values, KPRO5_SECRETS))


def of_kind(graph: UnitGraph, kind: str) -> list[Unit]:
    return [u for u in graph if u.kind == kind]


def test_kpro5_downloads_need_only_the_containers_devices():
    graph = kpro5_graph()
    downloads = of_kind(graph, "ModelDownload")
    assert [u.key for u in downloads] == ["ct129-model-qwen3-6-27b", "ct129-model-qwen3-6-27b-dflash"]
    for download in downloads:
        assert download.needs == ("ct129-gpu-devices",), download.key
        # What they wait for is the container's last restart, never the user space or an engine environment.
        assert not {k for k in closure(graph, download.key)
                    if graph[k].kind in ("ContainerUserspace", "PythonEnv", "InferenceService")}, download.key


def test_kpro5_engine_environments_wait_for_no_download():
    graph = kpro5_graph()
    envs = of_kind(graph, "PythonEnv")
    assert [u.key for u in envs] == ["ct129-env-qwen-sglang", "ct129-env-qwen-vllm-dflash"]
    for env in envs:
        assert not {k for k in closure(graph, env.key) if graph[k].kind == "ModelDownload"}, env.key
    # Downloads and environments run in one wave, beside the container's user space.
    (wave,) = [w for w in graph.waves() if "ct129-env-qwen-sglang" in w]
    assert set(wave) >= {u.key for u in envs + of_kind(graph, "ModelDownload")} | {"ct129-nvidia-userspace"}


def test_kpro5_services_wait_for_their_weights_environment_user_space_and_stopped_rival():
    graph = kpro5_graph()
    assert set(graph["ct129-service-qwen-sglang"].needs) == {
        "ct129-env-qwen-sglang", "ct129-model-qwen3-6-27b", "ct129-nvidia-userspace", "ct129-service-qwen-vllm-dflash"}
    assert set(graph["ct129-service-qwen-vllm-dflash"].needs) == {
        "ct129-env-qwen-vllm-dflash", "ct129-model-qwen3-6-27b", "ct129-model-qwen3-6-27b-dflash",
        "ct129-nvidia-userspace"}
    assert graph["ct129-gate-qwen-sglang"].needs == ("ct129-service-qwen-sglang",)


def weights_on_host(values: dict) -> None:
    values["containers"][0]["modelStore"] = {"hostPath": "/tank/models"}
    for service in values["services"]:
        service["weightsOn"] = "host"


def test_downloads_onto_the_host_model_store_need_nothing():
    graph = kpro5_graph(weights_on_host)
    downloads = of_kind(graph, "ModelDownload")
    assert len(downloads) == 2 and all(u.needs == () for u in downloads), [(u.key, u.needs) for u in downloads]
    assert set(u.key for u in downloads) <= set(graph.waves()[0])
    # They run on the host's side into the host path: no pct exec, nothing of the container.
    assert all("pct exec" not in u.ensure and "/tank/models/" in u.ensure for u in downloads)
    # The services see the weights only once the store is mounted.
    for service in of_kind(graph, "InferenceService"):
        assert "ct129-model-store" in service.needs and set(u.key for u in downloads) & set(service.needs)
    assert graph["ct129-model-store"].needs == ("ct129-gpu-devices",)


def test_the_trainers_downloads_and_environments_need_only_the_preflight():
    graph = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph
    for u in of_kind(graph, "ModelDownload") + of_kind(graph, "PythonEnv"):
        assert u.needs == ("preflight",), u.key
    assert graph.waves()[0] == ["preflight"]
    assert graph["training-monitor"].needs == ("env-monitor",)
    assert [u.key for u in graph.teardown_order][-1] == "preflight"


def descendants(graph, key: str) -> set[str]:
    """The units that need `key`, directly or through others."""
    found: set[str] = set()
    todo = [key]
    while todo:
        for other in graph.needed_by(todo.pop()):
            if other not in found:
                found.add(other)
                todo.append(other)
    return found


@pytest.mark.parametrize("stack", ["kpro5", "kpro5-model-store", "kpro5-reboot", "trainer"])
def test_every_plan_lists_each_need_before_its_unit(stack):
    if stack == "trainer":
        graph = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph
    elif stack == "kpro5-reboot":
        graph = kpro5_graph(lambda v: v["host"].update(allowReboot=True))
        # The reboot waits for every host unit that may ask for one (all the host's own units the containers do
        # not need first), and the containers wait for the reboot.
        assert graph["nvidia-uvm-at-boot"].needs == ("reboot",)
        after_reboot = {"reboot", *descendants(graph, "reboot")}
        assert set(graph["reboot"].needs) == {u.key for u in graph if u.container is None and u.key not in after_reboot}
        assert {"vfio-binding", "nvidia-driver"} <= set(graph["reboot"].needs)
    else:
        graph = kpro5_graph(weights_on_host if stack == "kpro5-model-store" else None)
    seen: set[str] = set()
    for u in graph:
        assert set(u.needs) <= seen, (u.key, u.needs)
        seen.add(u.key)


# --- the resource tree the plans declare ---------------------------------------------------------------------
CT = (("LxcContainer", "ct129"),)
SERVICE = CT + (("InferenceServiceStack", "svc"),)


def test_groups_come_outer_first_in_the_order_of_their_first_unit_and_within_nests_them():
    inner = within((("InferenceServiceStack", "svc"),), [unit("env"), unit("service", "env")])
    graph = UnitGraph([unit("driver"), *within(CT, [unit("devices", "driver"), *inner])],
                      [Group(SERVICE, {"listen": "0.0.0.0:1", "gate": Report("service")})])
    assert graph["service"].group == SERVICE and graph["devices"].group == CT and graph["driver"].group == ()
    assert graph.components() == [CT, SERVICE]
    assert graph.groups[SERVICE].outputs["gate"] == Report("service")


@pytest.mark.parametrize("units, groups, words", [
    ([unit("a")], [Group(SERVICE, {})], "group LxcContainer ct129/InferenceServiceStack svc has outputs but no unit"),
    (within(SERVICE, [unit("a")]) + [unit("b")], [Group(SERVICE, {"gate": Report("b")})],
     "output gate reports b, which is not a unit under it"),
    (within(CT + (("InferenceServiceStack", "x"),), [unit("a")]) +
     within((("LxcContainer", "ct130"), ("InferenceServiceStack", "x")), [unit("b")]), [],
     "would be one resource: give them different names"),
], ids=["outputs without units", "report of another group's unit", "one name under two containers"])
def test_a_bad_tree_is_refused_naming_the_groups(units, groups, words):
    with pytest.raises(GraphError) as caught:
        UnitGraph(units, groups)
    assert words in str(caught.value), str(caught.value)


@pytest.mark.parametrize("step", [("lxcContainer", "ct129"), ("LxcContainer", "CT129"), ("LxcContainer",)])
def test_a_group_step_that_cannot_name_a_component_is_refused(step):
    with pytest.raises(GraphError, match="is not \\(CamelCase kind, lower-case name\\)"):
        within((step,), [unit("a")])


def test_a_kind_that_cannot_name_a_resource_type_is_refused():
    with pytest.raises(GraphError, match="kind 'python-env' is not a CamelCase name"):
        Unit(key="a", kind="python-env", ensure="", teardown="", probe="")


def test_the_plans_put_every_unit_of_a_service_or_benchmark_under_it_and_the_host_units_under_the_host():
    graph = plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))
    by_group = {}
    for u in graph:
        by_group.setdefault(u.group, []).append(u.kind)
    # A unit inside a container sits under it; the rest under the host or a container whose devices it gives.
    assert all(u.group[:1] == (("LxcContainer", f"ct{u.container}"),) for u in graph if u.container is not None)
    assert all(u.group == () or u.group[0][0] == "LxcContainer" for u in graph), [(u.key, u.group) for u in graph]
    assert {"VfioBinding", "NvidiaDriver"} <= set(by_group[()])
    assert {"LxcGpuPassthrough", "ContainerUserspace", "ModelDownload"} <= set(by_group[(("LxcContainer", "ct129"),)])
    assert by_group[(("LxcContainer", "ct129"), ("InferenceServiceStack", "qwen-sglang"))] == [
        "PythonEnv", "InferenceService", "DeployGate"]
    assert by_group[(("LxcContainer", "ct129"), ("BenchmarkStack", "spec-bakeoff"))] == ["DDTreeCheckout", "PythonEnv", "Benchmark"]
    assert set(graph.groups) == {(("LxcContainer", "ct129"), ("InferenceServiceStack", "qwen-sglang")),
                                 (("LxcContainer", "ct129"), ("InferenceServiceStack", "qwen-vllm-dflash")),
                                 (("LxcContainer", "ct129"), ("BenchmarkStack", "spec-bakeoff"))}
    trainer = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph
    assert {u.key: u.group[-1][0] for u in trainer if u.group} == {
        "env-vllm": "HiddenStateServerStack", "hidden-state-server": "HiddenStateServerStack",
        "hidden-state-check": "HiddenStateServerStack", "env-monitor": "MonitorStack",
        "training-monitor": "MonitorStack", "drafter-convert": "TrainingJobStack",
        "dataset-qwen36-mix-913k": "TrainingJobStack", "dflash-training": "TrainingJobStack"}

