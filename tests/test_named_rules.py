"""Each rule of the services and of the benchmarks on its own (gpuhosts/services.py SERVICE_RULES,
gpuhosts/benchmarks.py BENCHMARK_RULES): the committed kpro5 passes every rule, and each rule finds its own case
of a stack changed from it, naming the field, while every other rule finds nothing there. A rule added without a
case here fails the table's own check."""

from __future__ import annotations

import copy

import pytest

from conftest import KPRO5_SECRETS, PROJECT, kpro5_values
from gpuhosts.benchmarks import BENCHMARK_RULES, BenchmarkRuleInput, validate_benchmark_entries
from gpuhosts.services import SERVICE_RULES, ServiceRuleInput, validate_service_entries
from gpuhosts.stacks import validate_stack

VFIO_GPU = "0000:01:00.0"


def given(values: dict, secret_keys=KPRO5_SECRETS) -> tuple[ServiceRuleInput, BenchmarkRuleInput]:
    stack = validate_stack({**values, "services": None, "benchmarks": None}, secret_keys)
    problems: list = []
    services = validate_service_entries(values["services"], problems)
    benchmarks = validate_benchmark_entries(values.get("benchmarks"), problems)
    assert problems == [], problems
    return (ServiceRuleInput(services, stack, frozenset(secret_keys)),
            BenchmarkRuleInput(benchmarks, tuple(s for _, s in services), frozenset(c.vmid for c in stack.containers),
                               frozenset(secret_keys), PROJECT))


def service(values: dict, index: int = 0) -> dict:
    return values["services"][index]


def without_benchmarks(values: dict) -> dict:
    """A change to the services alone: the bake-off that names them goes, so that only the services' rules speak."""
    values["benchmarks"] = []
    return values


def a_replica_named_like_the_other_service(values):
    first = service(values)
    first.pop("gpus")
    first["replicas"] = [{"gpus": ["0000:41:00.0"]}, {"gpus": ["0000:61:00.0"], "port": 30001}]
    service(values, 1)["name"] = "qwen-sglang-r1"
    without_benchmarks(values)


def replicas_sharing_a_port(values):
    first = service(values)
    first.pop("gpus")
    first["replicas"] = [{"gpus": ["0000:41:00.0"]}, {"gpus": ["0000:61:00.0"]}]


def weights_on_host_without_a_store(values):
    service(values)["weightsOn"] = "host"


def a_gateway_in_an_undeclared_container(values):
    service(values)["gateway"] = {"container": 130, "port": 30080}


SECRETS_WITHOUT_HF = KPRO5_SECRETS - {"hfToken"}
SERVICE_CASES = [
    # (rule, change to kpro5, secret keys, field of services[N], words)
    ("names_are_unique", lambda v: service(without_benchmarks(v), 1).update(name="qwen-sglang", sharesWith=[]),
     KPRO5_SECRETS, "services[1].name", "already declared"),
    ("replica_names_are_free", a_replica_named_like_the_other_service, KPRO5_SECRETS, "services[0].replicas[1]",
     "is named qwen-sglang-r1"),
    ("gpus_or_replicas", lambda v: service(v).update(replicas=[{"gpus": ["0000:41:00.0"]}]), KPRO5_SECRETS,
     "services[0].gpus", "is set beside replicas"),
    ("gpus_are_the_containers", lambda v: service(v).update(gpus=[VFIO_GPU, "0000:61:00.0"]), KPRO5_SECRETS,
     "services[0].gpus[0]", "use: vfio"),
    ("replicas_keep_to_their_own", replicas_sharing_a_port, KPRO5_SECRETS, "services[0].replicas[1].port",
     "is already replicas[0]'s"),
    ("gateway_rules", a_gateway_in_an_undeclared_container, KPRO5_SECRETS, "services[0].gateway.container",
     "container 130 is not declared"),
    ("api_keys_are_set", lambda v: service(v).update(apiKeySecret="otherKey"), KPRO5_SECRETS,
     "services[0].apiKeySecret", "otherKey"),
    ("open_binds_need_a_key", lambda v: service(v).pop("apiKeySecret"), KPRO5_SECRETS, "services[0].apiKeySecret",
     "listens beyond this machine"),
    ("gated_drafters_have_a_token", without_benchmarks, SECRETS_WITHOUT_HF, "services[1].speculative.drafter.gated",
     "hfToken is not set"),
    ("weights_lie_where_they_say", weights_on_host_without_a_store, KPRO5_SECRETS, "services[0].weightsOn",
     "has no modelStore"),
    ("shared_services_are_declared", lambda v: service(v, 1).update(sharesWith=["qwen-other"]), KPRO5_SECRETS,
     "services[1].sharesWith", "'qwen-other' is not a declared service"),
    ("one_download_per_directory", lambda v: service(without_benchmarks(v), 1)["model"].update(revision="a" * 40),
     KPRO5_SECRETS,
     "services[1].model.localDir", "one directory holds one download"),
]

BENCHMARK_CASES = [
    ("benchmark_names_are_unique", lambda v: v["benchmarks"].append(copy.deepcopy(v["benchmarks"][0])),
     KPRO5_SECRETS, "benchmarks[1].name", "already declared"),
    ("benchmark_containers_are_declared", lambda v: v["benchmarks"][0].update(container=130), KPRO5_SECRETS,
     "benchmarks[0].container", "container 130 is not declared"),
    ("benchmark_services_share_its_container", lambda v: v["benchmarks"][0]["services"].append("qwen-none"),
     KPRO5_SECRETS, "benchmarks[0].services[2]", "'qwen-none' is not a declared service"),
    ("prompts_fit_the_context", lambda v: service(v).update(contextLength=65536), KPRO5_SECRETS,
     "benchmarks[0].prompts.longContext.contextTokens", "do not fit"),
    ("compared_services_call_tools", lambda v: service(v).pop("toolCallParser"), KPRO5_SECRETS,
     "benchmarks[0].services[0]", "has no toolCallParser"),
    ("one_model_is_compared", lambda v: service(v, 1)["model"].update(repo="Qwen/Qwen3.6-8B",
                                                                     localDir="/srv/models/Qwen3.6-8B"),
     KPRO5_SECRETS, "benchmarks[0].services", "a bake-off compares one model"),
    ("reference_drafter_has_a_token",
     lambda v: service(v, 1)["speculative"]["drafter"].update(gated=False), SECRETS_WITHOUT_HF, "benchmarks[0].ddtree.drafter.gated",
     "hfToken is not set"),
    ("reference_environment_is_complete", lambda v: v["benchmarks"][0]["ddtree"].update(environmentOf="qwen-none"),
     KPRO5_SECRETS, "benchmarks[0].ddtree.environmentOf", "is not one of this benchmark's services"),
    ("reference_patch_is_reviewed", lambda v: v["benchmarks"][0]["ddtree"]["patch"].update(sha256="0" * 64),
     KPRO5_SECRETS, "benchmarks[0].ddtree.patch.sha256", "review the patch"),
    ("reference_drafter_directory_is_its_own",
     lambda v: v["benchmarks"][0]["ddtree"]["drafter"].update(revision="b" * 40), KPRO5_SECRETS,
     "benchmarks[0].ddtree.drafter.localDir", "give the same repo and revision"),
]


# Where a case cannot help tripping another rule too: a benchmark in a container that is not declared cannot
# compare services that run in a declared one.
ALSO = {"benchmark_containers_are_declared": {"benchmark_services_share_its_container"}}


def test_every_rule_has_its_case():
    assert [name for name, *_ in SERVICE_CASES] == [rule.__name__ for rule in SERVICE_RULES]
    assert [name for name, *_ in BENCHMARK_CASES] == [rule.__name__ for rule in BENCHMARK_RULES]


def findings(rules, rule_input) -> dict[str, list[tuple[int, str, str]]]:
    return {rule.__name__: list(rule(rule_input)) for rule in rules}


def test_the_committed_stack_passes_every_rule():
    services, benchmarks = given(kpro5_values(benchmarks=True))
    assert not any(findings(SERVICE_RULES, services).values())
    assert not any(findings(BENCHMARK_RULES, benchmarks).values())


@pytest.mark.parametrize("name, change, secret_keys, field, words",
                         SERVICE_CASES + BENCHMARK_CASES, ids=[case[0] for case in SERVICE_CASES + BENCHMARK_CASES])
def test_each_rule_finds_its_case_and_no_other_rule_does(name, change, secret_keys, field, words):
    values = kpro5_values(benchmarks=True)
    change(values)
    services, benchmarks = given(values, secret_keys)
    found = {**findings(SERVICE_RULES, services), **findings(BENCHMARK_RULES, benchmarks)}
    section = "benchmarks" if field.startswith("benchmarks") else "services"
    mine = [(f"{section}[{index}]" + (f".{where}" if where else ""), message) for index, where, message in found[name]]
    assert mine and mine[0][0] == field and words in mine[0][1], mine
    assert {other for other, hits in found.items() if hits and other != name} == ALSO.get(name, set())
