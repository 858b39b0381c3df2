"""The compatibility rule table (gpuhosts/compat-rules.yaml): every rule fires on the mistake it encodes and stays
quiet on the kpro5 services, and each finding names the field, the reason, the fix and the source."""

from __future__ import annotations

import pytest

from gpuhosts.compat import Severity, check_services, load_rules, model_facts, version_key
from services_data import kpro5_services
from model_configs import QWEN36_DRAFTER_CONFIG



def sglang(raw):
    return raw[0]


def vllm(raw):
    return raw[1]


def enable_both_on_own_gpus(raw):
    """Both services enabled, the vLLM one moved to a GPU of its own with TP 1, so that only the rule under test fires."""
    vllm(raw).update(enabled=True, gpus=["0000:61:00.0"], tensorParallelSize=1, sharesWith=[])
    sglang(raw).update(gpus=["0000:41:00.0"], tensorParallelSize=1)


def vllm_alone(change):
    def mutate(raw):
        enable_both_on_own_gpus(raw)
        change(vllm(raw))
    return mutate


TRIGGERED = [
    # (rule id, mutation of the kpro5 services, path, words in the message, drafter config.json by repo)
    ("sglang-qwen3.6-min-version", lambda r: sglang(r)["engine"].update(version="0.5.9"),
     "gpuhosts:services[0].engine.version", "sglang 0.5.9 with Qwen/Qwen3.6-27B (needs ≥ 0.5.10)", None),
    ("sglang-spec-gdn-extra-buffer", lambda r: sglang(r).update(mambaSchedulerStrategy="no_buffer"),
     "gpuhosts:services[0].mambaSchedulerStrategy", "--mamba-scheduler-strategy extra_buffer (have no_buffer)", None),
    ("sglang-spec-gdn-extra-buffer", lambda r: sglang(r).update(environment={"SGLANG_ENABLE_SPEC_V2": "0"}),
     "gpuhosts:services[0].mambaSchedulerStrategy", "SGLANG_ENABLE_SPEC_V2=1 (have 0)", None),
    ("sglang-spec-gdn-extra-buffer",
     lambda r: sglang(r)["speculative"].update(eagleTopk=2), "gpuhosts:services[0].mambaSchedulerStrategy",
     "eagleTopk ≤ 1 (have 2)", None),
    ("vllm-0.34.0-not-installable", vllm_alone(lambda s: s["engine"].update(version="0.34.0")),
     "gpuhosts:services[1].engine.version", "vllm 0.34.0 cannot serve here", None),
    ("vllm-dflash-layer-index", vllm_alone(lambda s: s["engine"].update(version="0.20.1", gitRef="0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90",
                                                                 includesPrs=[40898])),
     "gpuhosts:services[1].engine.version", "vllm 0.20.1 + 0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90 is not known to contain PR 40727", None),
    ("vllm-dflash-swa-drafter", vllm_alone(lambda s: s["engine"].update(version="0.20.1", includesPrs=[40727])),
     "gpuhosts:services[1].engine", "has neither PR 40898 nor PR 47914", None),
    ("vllm-dflash-swa-drafter", vllm_alone(lambda s: s.update(environment={"VLLM_USE_V2_MODEL_RUNNER": "0"})),
     "gpuhosts:services[1].engine", "runs without VLLM_USE_V2_MODEL_RUNNER=1", None),
    ("drafter-target-layer-ids",
     vllm_alone(lambda s: s["speculative"]["drafter"].update(targetLayerIds=[2, 14, 26, 38, 50])),
     "gpuhosts:services[1].speculative.drafter.targetLayerIds",
     "the configured targetLayerIds [2, 14, 26, 38, 50] differ from [1, 16, 31, 46, 61]", None),
    ("drafter-target-layer-ids", enable_both_on_own_gpus, "gpuhosts:services[1].speculative.drafter.targetLayerIds",
     "its config.json dflash_config.target_layer_ids [0, 15, 30, 45, 60] differ",
     {"z-lab/Qwen3.6-27B-DFlash": {**QWEN36_DRAFTER_CONFIG,
                                   "dflash_config": {"block_size": 16, "target_layer_ids": [0, 15, 30, 45, 60]}}}),
    ("tensor-parallel-within-gpus", lambda r: sglang(r).update(gpus=["0000:41:00.0"]),
     "gpuhosts:services[0].tensorParallelSize", "tensorParallelSize 2 with 1 GPU(s) listed", None),
    ("shared-port", vllm_alone(lambda s: s.update(port=30000)), "gpuhosts:services[1].port",
     "port 30000 is the same as services[0] (qwen-sglang) without sharesWith", None),
    ("shared-port", vllm_alone(lambda s: s.update(port=30000, sharesWith=["qwen-sglang"])), "gpuhosts:services[1].port",
     "and both are enabled", None),
    # One wildcard rule (gpuhosts/fields.py binds_meet): :: takes IPv4 too on a dual-stack Linux host.
    ("shared-port", vllm_alone(lambda s: s.update(port=30000, bind="::")), "gpuhosts:services[1].port",
     "port 30000 is the same as services[0] (qwen-sglang)", None),
    ("shared-port", lambda r: (enable_both_on_own_gpus(r), sglang(r).update(bind="::"),
                               vllm(r).update(port=30000, bind="127.0.0.1")), "gpuhosts:services[1].port",
     "port 30000 is the same", None),
    ("context-beyond-the-model", lambda r: sglang(r).update(contextLength=1000000),
     "gpuhosts:services[0].contextLength",
     "contextLength 1000000 is beyond Qwen/Qwen3.6-27B's max_position_embeddings 262144", None),
    ("derived-flag-in-extra-args", lambda r: sglang(r).update(extraArgs=["--port", "8001"]),
     "gpuhosts:services[0].extraArgs", "extraArgs[0] is --port, which gpuhosts derives for sglang 0.5.11", None),
    ("derived-flag-in-extra-args", lambda r: sglang(r).update(extraArgs=["--enable-torch-compile",
                                                                         "--context-length=1000000"]),
     "gpuhosts:services[0].extraArgs", "extraArgs[1] is --context-length", None),
    ("derived-flag-in-extra-args", vllm_alone(lambda s: s.update(extraArgs=["--tensor-parallel-size", "2"])),
     "gpuhosts:services[1].extraArgs", "--tensor-parallel-size, which gpuhosts derives for vllm", None),
    ("shared-gpus", lambda r: vllm(r).update(sharesWith=[]), "gpuhosts:services[1].gpus",
     "GPUs 0000:41:00.0, 0000:61:00.0 are the same as services[0] (qwen-sglang) without sharesWith", None),
    ("shared-gpus", lambda r: vllm(r).update(enabled=True), "gpuhosts:services[1].gpus", "and both are enabled", None),
]


@pytest.mark.parametrize("rule,mutate,path,words,drafters", TRIGGERED, ids=[f"{t[0]}-{i}" for i, t in enumerate(TRIGGERED)])
def test_rule_fires(rule, mutate, path, words, drafters):
    findings = check_services(kpro5_services(mutate), drafter_configs=drafters)
    assert [f.rule for f in findings] == [rule], "\n".join(map(str, findings))
    (finding,) = findings
    assert finding.path == path and words in finding.message, str(finding)
    assert finding.reason and finding.fix and finding.source.startswith(("https://", "gpuhosts"))


NOT_TRIGGERED = [
    ("the kpro5 services as declared", lambda r: None, None),
    ("sglang 0.5.10, the first good release", lambda r: sglang(r)["engine"].update(version="0.5.10"), None),
    ("sglang 0.5.9 without Qwen3.6", lambda r: sglang(r).update(
        model={"repo": "Qwen/Qwen3-32B"}, speculative={"method": "none"}), None),
    ("sglang without speculative decoding needs no extra buffer", lambda r: sglang(r).update(
        speculative={"method": "none"}), None),
    ("vllm build of the 40898 head with the layer-index fix", vllm_alone(lambda s: s["engine"].update(
        version="0.20.1", gitRef="0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90", includesPrs=[40898, 40727])), None),
    ("vllm release with the replacements listed", vllm_alone(lambda s: s["engine"].update(
        version="0.25.0", includesPrs=[40727, 47914, 48113])), None),
    ("a drafter without sliding window on an old vllm with the fix",
     vllm_alone(lambda s: (s["engine"].update(version="0.20.1", includesPrs=[40727]),
                           s["speculative"]["drafter"].update(slidingWindow=False))), None),
    ("the drafter's own config agrees", enable_both_on_own_gpus, {"z-lab/Qwen3.6-27B-DFlash": QWEN36_DRAFTER_CONFIG}),
    ("targetLayerIds as derived", vllm_alone(lambda s: s["speculative"]["drafter"].update(
        targetLayerIds=[1, 16, 31, 46, 61])), None),
    ("TP equal to the GPUs", lambda r: sglang(r).update(tensorParallelSize=2), None),
    ("both enabled on their own ports and GPUs", enable_both_on_own_gpus, None),
    ("the same port on different addresses", lambda r: (enable_both_on_own_gpus(r), sglang(r).update(bind="10.0.0.5"),
                                                        vllm(r).update(port=30000, bind="127.0.0.1")), None),
    ("a shared port declared, one service stopped", lambda r: vllm(r).update(port=30000), None),
    ("the IPv4 wildcard and an IPv6 address", lambda r: (enable_both_on_own_gpus(r), sglang(r).update(bind="0.0.0.0"),
                                                         vllm(r).update(port=30000, bind="::1")), None),
    ("the model's own context length", lambda r: sglang(r).update(contextLength=262144), None),
    ("a flag gpuhosts does not derive", lambda r: sglang(r).update(extraArgs=["--enable-torch-compile"]), None),
]


@pytest.mark.parametrize("case,mutate,drafters", NOT_TRIGGERED, ids=[c for c, *_ in NOT_TRIGGERED])
def test_rule_stays_quiet(case, mutate, drafters):
    findings = check_services(kpro5_services(mutate), drafter_configs=drafters)
    assert findings == [], "\n".join(map(str, findings))


def test_every_rule_has_a_firing_test_and_a_source():
    rules = load_rules().rules
    assert {r.id for r in rules} == {t[0] for t in TRIGGERED}
    assert len({r.id for r in rules}) == len(rules), "rule ids are unique"
    for rule in rules:
        assert rule.severity in (Severity.ERROR, Severity.WARNING)
        assert rule.source and rule.reason and rule.fix, rule.id


def test_finding_reads_as_one_line_with_reason_fix_and_source():
    (finding,) = check_services(kpro5_services(lambda r: sglang(r)["engine"].update(version="0.5.9")))
    text = str(finding)
    assert text.startswith("error: gpuhosts:services[0].engine.version: sglang 0.5.9")
    assert "Fix: pin engine.version" in text and "[rule sglang-qwen3.6-min-version; https://huggingface.co/" in text
    assert "\n" not in text


def test_known_models_table():
    assert model_facts("Qwen/Qwen3.6-27B").num_layers == 64 and model_facts("Qwen/Qwen3.6-27B").gdn_hybrid
    assert model_facts("Qwen/Qwen3.6-35B-A3B").family == "qwen3.6"
    assert model_facts("meta-llama/Llama-3.1-8B") == model_facts("x/y")


@pytest.mark.parametrize("low,high", [("0.5.9", "0.5.10"), ("0.5.10", "0.5.10.post1"), ("0.5.11rc1", "0.5.11"),
                                      ("0.5.11.dev3", "0.5.11rc1"), ("0.20.2", "0.26.0")])
def test_version_order(low, high):
    assert version_key(low) < version_key(high)


class ReadParams(dict):
    """A rule's params that remember which of them its check read."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def test_every_param_of_every_rule_is_read_by_its_check():
    """A param no check reads is a fact written down twice, once of them dead."""
    from gpuhosts.compat import CHECKS, Context

    rules = load_rules()
    services = kpro5_services(enable_both_on_own_gpus)
    ctx = Context(services=list(enumerate(services)), rules=rules, drafter_configs={})
    for rule in rules.rules:
        params = ReadParams(rule.params)
        CHECKS[rule.check](params, ctx)
        assert params.read == set(rule.params), f"rule {rule.id}: params never read: {set(rule.params) - params.read}"

