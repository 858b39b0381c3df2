"""Replicas and their gateway, by their plan: the ownership rules across replicas refused at plan time naming the
field, the rollout's order (drain, environment, unit, gate, put back, then the next replica), and the gateway's
command line against what smg's own parser made of it (tests/fixtures/gateway, written by tests/verify_gateway)."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, KPRO5_SECRETS
from gpuhosts.config import ConfigError
from gpuhosts.plans.gateway import gateway_argv, render_gateway, router_flags, worker_urls
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.stacks import validate_stack
from replicas_data import GATEWAY, replica_stack, replica_values

SMG = json.loads((FIXTURES / "gateway" / "smg-1.13.0.json").read_text())


def service(values):
    return values["services"][0]


def replicas(values):
    return service(values)["replicas"]


BAD = [
    ("a vfio GPU given to a replica", lambda v: replicas(v)[1].update(gpus=["0000:01:00.0"]),
     "gpuhosts:services[0].replicas[1].gpus[0]", "use: vfio"),
    ("one GPU given to two replicas", lambda v: replicas(v)[1].update(gpus=["0000:41:00.0"]),
     "gpuhosts:services[0].replicas[1].gpus[0]", "already replicas[0]'s"),
    ("two replicas on one port of one container", lambda v: replicas(v)[1].pop("port"),
     "gpuhosts:services[0].replicas[1].port", "port of its own"),
    ("a replica in an undeclared container", lambda v: replicas(v)[1].update(container=131),
     "gpuhosts:services[0].replicas[1].container", "not declared"),
    ("gpus beside replicas", lambda v: service(v).update(gpus=["0000:41:00.0"]),
     "gpuhosts:services[0].gpus", "beside replicas"),
    ("neither gpus nor replicas", lambda v: service(v).pop("replicas"), "gpuhosts:services[0].gpus", "is required"),
    ("a replica's GPU that its container lacks",
     lambda v: (v["containers"].append({"vmid": 130, "hostname": "llm2"}), replicas(v)[1].update(container=130)),
     "gpuhosts:services[0].replicas[1].gpus[0]", "not one of container 130's GPUs"),
    ("a replica outside the gateway's container without an address",
     lambda v: (v["containers"].append({"vmid": 130, "hostname": "llm2"}),
                v["gpus"][3].update(container=130), replicas(v)[1].update(container=130)),
     "gpuhosts:services[0].replicas[1].address", "is required"),
    ("a gateway without an API key", lambda v: service(v).pop("apiKeySecret"),
     "gpuhosts:services[0].gateway.apiKeySecret", "is required"),
    ("a gateway key that is not a secret", lambda v: service(v)["gateway"].update(apiKeySecret="gatewayKey"),
     "gpuhosts:services[0].gateway.apiKeySecret", "not a secret"),
    ("a gateway on a replica's port", lambda v: service(v)["gateway"].update(port=30001),
     "gpuhosts:services[0].gateway.port", "port of qwen-sglang-r1"),
    ("a gateway in front of a stopped service", lambda v: service(v).update(enabled=False),
     "gpuhosts:services[0].gateway", "enabled: false"),
    ("a replica TP larger than its GPUs", lambda v: service(v).update(tensorParallelSize=2),
     "gpuhosts:services[0].tensorParallelSize", "replica qwen-sglang-r1"),
]


@pytest.mark.parametrize("case, mutate, path, words", BAD, ids=[case for case, *_ in BAD])
def test_a_bad_replica_or_gateway_is_refused_naming_the_field(case, mutate, path, words):
    with pytest.raises(ConfigError) as error:
        replica_stack(mutate)
    found = [p for p in error.value.problems if p.path == path]
    assert found, f"{case}: no problem at {path}: {error.value}"
    assert any(words in p.message for p in found), f"{case}: {found}"


def test_a_service_without_replicas_is_one_instance_of_its_own_name():
    (svc,) = validate_stack(replica_values(lambda v: (service(v).pop("replicas"), service(v).pop("gateway"),
                                                      service(v).update(gpus=["0000:41:00.0"]))),
                            KPRO5_SECRETS).services
    assert [(i.name, i.gpus, i.port) for i in svc.instances] == [("qwen-sglang", ("0000:41:00.0",), 30000)]


def test_replicas_are_instances_on_their_own_gpus_and_ports():
    (svc,) = replica_stack().services
    assert [(i.name, i.container, i.gpus, i.port, i.family) for i in svc.instances] == [
        ("qwen-sglang", 129, ("0000:41:00.0",), 30000, "qwen-sglang"),
        ("qwen-sglang-r1", 129, ("0000:61:00.0",), 30001, "qwen-sglang")]


def test_each_replica_gets_the_gpu_its_cuda_index_names():
    units = plan_host(replica_stack()).units
    assert "CUDA_VISIBLE_DEVICES=0" in units["ct129-service-qwen-sglang"].files[0].content
    assert "CUDA_VISIBLE_DEVICES=1" in units["ct129-service-qwen-sglang-r1"].files[0].content


ROLLOUT = [  # unit, what it waits for (among others)
    ("ct129-gateway-qwen-sglang", "ct129-env-gateway-qwen-sglang"),
    ("ct129-drain-qwen-sglang", "ct129-gateway-qwen-sglang"),
    ("ct129-env-qwen-sglang", "ct129-drain-qwen-sglang"),
    ("ct129-service-qwen-sglang", "ct129-env-qwen-sglang"),
    ("ct129-gate-qwen-sglang", "ct129-service-qwen-sglang"),
    ("ct129-admit-qwen-sglang", "ct129-gate-qwen-sglang"),
    ("ct129-drain-qwen-sglang-r1", "ct129-admit-qwen-sglang"),
    ("ct129-env-qwen-sglang-r1", "ct129-drain-qwen-sglang-r1"),
    ("ct129-service-qwen-sglang-r1", "ct129-env-qwen-sglang-r1"),
    ("ct129-gate-qwen-sglang-r1", "ct129-service-qwen-sglang-r1"),
    ("ct129-admit-qwen-sglang-r1", "ct129-gate-qwen-sglang-r1"),
]


@pytest.mark.parametrize("unit, waits_for", ROLLOUT, ids=[u for u, _ in ROLLOUT])
def test_a_rollout_goes_through_the_replicas_one_at_a_time(unit, waits_for):
    assert waits_for in plan_host(replica_stack()).units[unit].needs


def test_without_a_gateway_the_next_replica_waits_for_the_previous_gate():
    units = plan_host(replica_stack(lambda v: service(v).pop("gateway"))).units
    assert "ct129-gate-qwen-sglang" in units["ct129-env-qwen-sglang-r1"].needs
    assert not any(u.kind.startswith("Gateway") for u in units.values())


def test_a_flag_change_reruns_each_replicas_drain_and_put_back_and_leaves_the_gateway():
    before = plan_host(replica_stack()).units
    after = plan_host(replica_stack(lambda v: service(v).update(extraArgs=["--log-level", "debug"]))).units
    changed = {key for key in before if before[key].digest != after[key].digest}
    assert {"ct129-drain-qwen-sglang-r1", "ct129-admit-qwen-sglang-r1", "ct129-service-qwen-sglang-r1",
            "ct129-drain-qwen-sglang", "ct129-admit-qwen-sglang"} <= changed
    assert "ct129-gateway-qwen-sglang" not in changed


def test_the_gateway_flags_are_those_smgs_own_parser_read():
    svc = replica_stack().services[0]
    assert router_flags(svc) == SMG["flags"], "the rendering changed: run tests/verify_gateway/run.py"
    parsed = SMG["parsed"]
    assert parsed["worker_urls"] == worker_urls(svc) == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    assert (parsed["host"], parsed["port"], parsed["policy"]) == ("0.0.0.0", GATEWAY["port"], GATEWAY["policy"])
    health = GATEWAY["health"]
    assert (parsed["health_check_interval_secs"], parsed["health_check_timeout_secs"],
            parsed["health_failure_threshold"], parsed["health_success_threshold"]) == (
        health["intervalS"], health["timeoutS"], health["failureThreshold"], health["successThreshold"])
    assert parsed["api_key"] is None, "the key reaches smg from its EnvironmentFile, never from argv"


def test_the_gateway_unit_runs_the_launcher_with_the_key_only_in_its_environment_file():
    svc = replica_stack().services[0]
    unit, launcher, _script = render_gateway(svc)
    assert gateway_argv(svc)[1] == launcher.path and launcher.mode == "0755"
    assert "EnvironmentFile=/etc/gpuhosts/gateway-qwen-sglang.env" in unit.content
    assert "--api-key" not in unit.content
    assert "args.api_key = key" in launcher.content and "parse_router_args(sys.argv[1:])" in launcher.content
    gateway = plan_host(replica_stack()).units["ct129-gateway-qwen-sglang"]
    assert gateway.stdin_secret == "llmApiKey"


def test_the_put_back_is_a_fact_a_refresh_reads_and_the_drain_says_why_it_has_none():
    units = plan_host(replica_stack()).units
    assert units["ct129-admit-qwen-sglang-r1"].desired == {"qwen-sglang-r1 in gateway-qwen-sglang": "ready"}
    assert "ct129-admit-qwen-sglang-r1" in units["ct129-drain-qwen-sglang-r1"].no_facts_because
