"""gpuhosts:services: the kpro5 example validates, and every bad entry is refused naming its field and the fix."""

from __future__ import annotations

import pytest

from conftest import KPRO5_SECRETS
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack
from gpuhosts.services import SpecMethod, referenced_secrets, validate_services
from services_data import example, kpro5_services, kpro5_stack


def test_kpro5_declares_sglang_mtp_enabled_and_vllm_dflash_on_another_port():
    sglang, vllm = kpro5_services()
    assert (sglang.engine.name, sglang.engine.version, sglang.enabled) == ("sglang", "0.5.11", True)
    spec = sglang.speculative
    assert (spec.method, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (SpecMethod.MTP, 3, 1, 4)
    assert sglang.tensor_parallel_size == 2 and sglang.gpus == ("0000:41:00.0", "0000:61:00.0")
    assert vllm.engine.name == "vllm" and vllm.speculative.method is SpecMethod.DFLASH
    assert vllm.speculative.drafter.repo == "z-lab/Qwen3.6-27B-DFlash" and vllm.speculative.drafter.gated
    assert vllm.port != sglang.port and not vllm.enabled and vllm.shares_with == ("qwen-sglang",)


def test_defaults_are_documented_and_safe():
    (service,) = validate_services([{"name": "small", "container": 129, "engine": {"name": "vllm", "version": "0.26.0"},
                                     "model": {"repo": "Qwen/Qwen3-8B"}, "gpus": ["41:00.0"], "port": 8001}],
                                   kpro5_stack())
    assert service.bind == "127.0.0.1" and service.enabled and service.tensor_parallel_size == 1
    assert service.speculative.method is SpecMethod.NONE and service.api_key_secret is None
    assert service.model.path == "/srv/models/Qwen/Qwen3-8B" and service.model_name == "Qwen3-8B"
    for name, field in type(service).model_fields.items():
        assert field.description or field.annotation.__name__.endswith("Spec"), name


def entry(raw, index=0):
    return raw[index]


BAD = [
    # (case, mutation, path the message names, words the message contains)
    ("engine not a name", lambda r: entry(r)["engine"].update(name="TGI 2"), "gpuhosts:services[0].engine.name",
     "is not 1 to 40 lower-case letters, digits, '_' or '-', beginning with a letter"),
    ("version as a YAML number", lambda r: entry(r)["engine"].update(version=0.5), "gpuhosts:services[0].engine.version",
     "quote it"),
    ("version not exact", lambda r: entry(r)["engine"].update(version="0.5"), "gpuhosts:services[0].engine.version",
     "not an exact release"),
    ("git ref not a ref", lambda r: entry(r, 1)["engine"].update(gitRef="pr-40898"), "gpuhosts:services[1].engine.gitRef",
     "is not a full commit"),
    ("git ref that may move", lambda r: entry(r, 1)["engine"].update(gitRef="refs/pull/40898/head"),
     "gpuhosts:services[1].engine.gitRef", "git ls-remote REPOSITORY refs/pull/40898/head"),
    ("git ref abbreviated", lambda r: entry(r, 1)["engine"].update(gitRef="0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90"[:12]),
     "gpuhosts:services[1].engine.gitRef", "pin the 40 hex digits"),
    ("model not owner/name", lambda r: entry(r)["model"].update(repo="Qwen3.6-27B"), "gpuhosts:services[0].model.repo",
     "owner/name"),
    ("relative model dir", lambda r: entry(r)["model"].update(localDir="models/q"), "gpuhosts:services[0].model.localDir",
     "absolute path"),
    ("GPU of another use", lambda r: entry(r).update(gpus=["0000:01:00.0"]), "gpuhosts:services[0].gpus[0]",
     "not one of container 129's GPUs"),
    ("GPU not an address", lambda r: entry(r).update(gpus=["gpu0"]), "gpuhosts:services[0].gpus", "PCI address"),
    ("container not declared", lambda r: entry(r).update(container=130), "gpuhosts:services[0].container",
     "not declared"),
    ("duplicate name", lambda r: entry(r, 1).update(name="qwen-sglang"), "gpuhosts:services[1].name", "already declared"),
    ("dflash without drafter", lambda r: entry(r, 1)["speculative"].pop("drafter"), "gpuhosts:services[1].speculative",
     "needs drafter"),
    ("mtp with a drafter", lambda r: entry(r)["speculative"].update(drafter={"repo": "a/b"}),
     "gpuhosts:services[0].speculative", "no separate drafter"),
    ("draft tokens beyond the tree", lambda r: entry(r)["speculative"].update(numDraftTokens=8),
     "gpuhosts:services[0].speculative", "numSteps × eagleTopk + 1"),
    ("API key not a secret", lambda r: entry(r).update(apiKeySecret="apiKey"), "gpuhosts:services[0].apiKeySecret",
     "pulumi config set --secret gpuhosts:apiKey"),
    ("API key on the command line", lambda r: entry(r).update(extraArgs=["--api-key=abc"]),
     "gpuhosts:services[0].extraArgs", "use apiKeySecret"),
    ("token in plain environment", lambda r: entry(r).update(environment={"HF_TOKEN": "hf_x"}),
     "gpuhosts:services[0].environment", "looks like a secret"),
    ("sharesWith unknown", lambda r: entry(r, 1).update(sharesWith=["nope"]), "gpuhosts:services[1].sharesWith",
     "not a declared service"),
    ("memory fraction of 1", lambda r: entry(r).update(memFraction=1.0), "gpuhosts:services[0].memFraction", "less than 1"),
    ("port below 1024", lambda r: entry(r).update(port=80), "gpuhosts:services[0].port", "1024"),
    ("misspelt field", lambda r: entry(r).update(tensorParallel=2), "gpuhosts:services[0].tensorParallel", "unknown field"),
]


@pytest.mark.parametrize("case,mutate,path,words", BAD, ids=[case for case, *_ in BAD])
def test_bad_service_is_refused_naming_the_field(case, mutate, path, words):
    raw, secure = example()
    mutate(raw)
    with pytest.raises(ConfigError) as caught:
        validate_services(raw, kpro5_stack(), secure)
    matching = [p for p in caught.value.problems if p.path == path]
    assert matching, f"no problem at {path}: {caught.value}"
    assert any(words in p.message for p in matching), str(caught.value)


def test_gated_drafter_needs_the_hf_token_secret():
    raw, secure = example()
    with pytest.raises(ConfigError) as caught:
        validate_services(raw, kpro5_stack(), secure - {"hfToken"})
    assert [str(p) for p in caught.value.problems] == [
        "gpuhosts:services[1].speculative.drafter.gated: z-lab/Qwen3.6-27B-DFlash is gated and gpuhosts:hfToken is "
        "not set; `pulumi config set --secret gpuhosts:hfToken`"]


def test_every_problem_is_reported_at_once():
    raw, secure = example()
    raw[0]["engine"]["version"] = "latest"
    raw[1]["port"] = 1
    with pytest.raises(ConfigError) as caught:
        validate_services(raw, kpro5_stack(), secure)
    assert {p.path for p in caught.value.problems} == {"gpuhosts:services[0].engine.version", "gpuhosts:services[1].port"}


def test_no_services_is_valid():
    assert validate_services(None, kpro5_stack()) == ()


def stack_entry(values: dict, index: int = 0) -> dict:
    return values["services"][index]


def with_store(values: dict) -> None:
    values["containers"][0]["modelStore"] = {"hostPath": "/tank/models"}


STACK_BAD = [
    # What an engine serves at all is its driver's: checked with the stack, where the drivers are known.
    ("unknown engine", lambda v: stack_entry(v)["engine"].update(name="tgi"), "gpuhosts:services[0].engine.name",
     "no driver for engine 'tgi'; use one of: sglang, vllm"),
    ("dflash on sglang", lambda v: stack_entry(v, 1)["engine"].update(name="sglang", version="0.5.11"),
     "gpuhosts:services[1].speculative.method", "dflash is not served by sglang; use engine vllm"),
    ("an SGLang setting for vllm", lambda v: stack_entry(v, 1).update(mambaSchedulerStrategy="extra_buffer"),
     "gpuhosts:services[1].mambaSchedulerStrategy", "is a setting of sglang, not of vllm; remove it"),
    ("weights on host without a store", lambda v: stack_entry(v).update(weightsOn="host"),
     "gpuhosts:services[0].weightsOn", "has no modelStore"),
    ("weights on host outside the store", lambda v: (with_store(v), stack_entry(v).update(weightsOn="host"),
                                                     stack_entry(v)["model"].update(localDir="/opt/m")),
     "gpuhosts:services[0].model.localDir", "not under the container's modelStore"),
    ("container weights inside the store", with_store, "gpuhosts:services[0].model.localDir", "set weightsOn: host"),
    ("one directory, two revisions", lambda v: stack_entry(v, 1)["model"].update(revision="v2"),
     "gpuhosts:services[1].model.localDir", "one directory holds one download"),
    ("a compatibility error stops the stack", lambda v: stack_entry(v)["engine"].update(version="0.5.9"),
     "gpuhosts:services[0].engine.version", "rule sglang-qwen3.6-min-version"),
    ("an unknown container", lambda v: stack_entry(v).update(container=130), "gpuhosts:services[0].container",
     "not declared"),
]


@pytest.mark.parametrize("case,mutate,path,words", STACK_BAD, ids=[case for case, *_ in STACK_BAD])
def test_bad_service_in_the_stack_is_refused_naming_the_field(kpro5, case, mutate, path, words):
    mutate(kpro5)
    with pytest.raises(ConfigError) as caught:
        validate_stack(kpro5, KPRO5_SECRETS)
    matching = [p for p in caught.value.problems if p.path == path]
    assert matching, f"no problem at {path}: {caught.value}"
    assert any(words in p.message for p in matching), str(caught.value)


def test_weights_on_host_storage_are_valid_under_the_store(kpro5):
    with_store(kpro5)
    for service in kpro5["services"]:
        service["weightsOn"] = "host"
    config = validate_stack(kpro5, KPRO5_SECRETS)
    assert config.containers[0].model_store.path == "/srv/models"
    assert {s.weights_on.value for s in config.services} == {"host"}


def test_a_service_field_error_is_reported_with_the_host_errors(kpro5):
    kpro5["host"]["ssh"]["port"] = 0
    stack_entry(kpro5)["port"] = 1
    with pytest.raises(ConfigError) as caught:
        validate_stack(kpro5, KPRO5_SECRETS)
    assert {"gpuhosts:host.ssh.port", "gpuhosts:services[0].port"} <= {p.path for p in caught.value.problems}


def test_a_secret_given_as_plain_config_is_refused(kpro5):
    kpro5["llmApiKey"] = "plain-text-key"
    with pytest.raises(ConfigError) as caught:
        validate_stack(kpro5, KPRO5_SECRETS - {"llmApiKey"})
    (problem,) = [p for p in caught.value.problems if p.path == "gpuhosts:llmApiKey"]
    assert "pulumi config set --secret gpuhosts:llmApiKey" in problem.message
    assert "plain-text-key" not in str(caught.value)


@pytest.mark.parametrize("raw, expected", [
    (None, set()),
    ("not a list", set()),
    ([{"apiKeySecret": "llmApiKey"}], {"llmApiKey"}),
    ([{"speculative": {"drafter": {"gated": True}}}], {"hfToken"}),
    ([{"speculative": {"drafter": {"gated": False}}}, {"apiKeySecret": 3}], set()),
])
def test_referenced_secrets(raw, expected):
    assert referenced_secrets(raw) == expected
