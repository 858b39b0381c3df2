"""gpuhosts:benchmarks: kpro5's bake-off validates and is summarised under its container; a bad benchmark is refused
naming its field, before any host is touched."""

from __future__ import annotations

import copy
import hashlib

import pytest

from conftest import KPRO5_SECRETS, PROJECT, kpro5_values
from gpuhosts.benchmarks import DDTREE_IMPORTS, Measure, environment_lacks
from gpuhosts.config import ConfigError
from gpuhosts.plans.proxmox_host import plan_host, summarize_host
from gpuhosts.stacks import validate_stack


@pytest.fixture
def kpro5() -> dict:
    return kpro5_values(benchmarks=True)


def bench(values: dict) -> dict:
    return values["benchmarks"][0]


def test_kpro5_declares_one_bakeoff_of_both_services_with_the_ddtree_reference(kpro5):
    config = validate_stack(kpro5, KPRO5_SECRETS)
    (declared,) = config.benchmarks
    assert declared.container == 129 and declared.services == ("qwen-sglang", "qwen-vllm-dflash")
    assert declared.prompts.long_context.context_tokens >= 100_000 and declared.measure == tuple(Measure)
    reference = declared.ddtree
    assert reference.repository == "https://github.com/liranringel/ddtree" and len(reference.commit) == 40
    patch = PROJECT / reference.patch.file
    assert hashlib.sha256(patch.read_bytes()).hexdigest() == reference.patch.sha256
    # DDTree's own environment, not a service's.
    assert reference.environment_of is None
    summary = summarize_host(config)["containers"]["129"]["benchmarks"]["spec-bakeoff"]
    assert summary["services"] == ["qwen-sglang", "qwen-vllm-dflash"]
    assert summary["ddtree"]["commit"] == reference.commit and reference.patch.sha256 in summary["ddtree"]["patch"]
    assert summary["results"].startswith("/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/")


def test_the_benchmark_unit_waits_for_every_service_on_its_gpus_the_gate_and_the_reference(kpro5):
    graph = plan_host(validate_stack(kpro5, KPRO5_SECRETS))
    unit = graph["ct129-bench-spec-bakeoff"]
    assert unit.kind == "Benchmark"
    assert {"ct129-service-qwen-sglang", "ct129-service-qwen-vllm-dflash", "ct129-gate-qwen-sglang",
            "ct129-ddtree-spec-bakeoff"} <= set(unit.needs)
    # The reference drafts with the drafter vLLM serves: one download of it, which the benchmark waits for.
    downloads = [u for u in graph if u.kind == "ModelDownload"]
    drafter = [u for u in downloads if "Qwen3.6-27B-DFlash" in str(u.desired)]
    assert len(drafter) == 1 and drafter[0].key in unit.needs


def test_the_sglang_lock_holds_what_ddtree_imports_and_the_vllm_lock_does_not(kpro5):
    sglang, vllm = validate_stack(kpro5, KPRO5_SECRETS).services
    assert environment_lacks(sglang, DDTREE_IMPORTS) == []
    assert "datasets" in environment_lacks(vllm, DDTREE_IMPORTS)


def other_container(values: dict) -> None:
    """A second GPU container, 130, with a service of its own on one of the RTX 3090."""
    values["gpus"][1] = {"address": "0000:21:00.0", "model": "RTX 3090", "use": "container", "container": 130}
    values["containers"].append({"vmid": 130, "hostname": "small"})
    values["services"].append({"name": "small-vllm", "container": 130, "engine": {"name": "vllm", "version": "0.26.0"},
                               "model": {"repo": "Qwen/Qwen3-8B"}, "gpus": ["0000:21:00.0"], "port": 8001,
                               "toolCallParser": "hermes"})


def set_in(path: tuple, value):
    def mutate(values):
        target = bench(values)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def chain(*mutations):
    def mutate(values):
        for m in mutations:
            m(values)
    return mutate


BAD = [
    ("unknown service", set_in(("services",), ["qwen-sglang", "qwen-nope"]),
     "gpuhosts:benchmarks[0].services[1]", "'qwen-nope' is not a declared service"),
    ("service of another container", chain(other_container, set_in(("services",), ["qwen-sglang", "small-vllm"])),
     "gpuhosts:benchmarks[0].services[1]", "'small-vllm' runs in container 130, not in 129"),
    ("undeclared container", set_in(("container",), 131), "gpuhosts:benchmarks[0].container",
     "container 131 is not declared"),
    ("no service", set_in(("services",), []), "gpuhosts:benchmarks[0].services", "at least one service"),
    ("a service twice", set_in(("services",), ["qwen-sglang", "qwen-sglang"]), "gpuhosts:benchmarks[0].services",
     "names a service twice"),
    ("short long context", set_in(("prompts",), {"longContext": {"contextTokens": 32768}}),
     "gpuhosts:benchmarks[0].prompts.longContext.contextTokens", "must be at least 100000, not 32768"),
    ("long context beyond a service", set_in(("prompts",), {"longContext": {"contextTokens": 131000}}),
     "gpuhosts:benchmarks[0].prompts.longContext.contextTokens", "do not fit service qwen-sglang's contextLength 131072"),
    ("no tool parser", lambda v: v["services"][1].pop("toolCallParser"), "gpuhosts:benchmarks[0].services[1]",
     "qwen-vllm-dflash has no toolCallParser"),
    ("a prompt with a newline", set_in(("prompts",), {"shortChat": "hi\nGPUHOSTS_INNER\nreboot"}),
     "gpuhosts:benchmarks[0].prompts.shortChat", "control character"),
    ("unknown figure", set_in(("measure",), ["decodeTokensPerS", "vibes"]), "gpuhosts:benchmarks[0].measure[1]",
     "'vibes' is not allowed; use one of"),
    ("unknown setting", set_in(("warmup",), True), "gpuhosts:benchmarks[0].warmup",
     "unknown field 'warmup'"),
    ("bad run id", set_in(("runId",), "2026-12-01; reboot"), "gpuhosts:benchmarks[0].runId", "is not a run id"),
    ("short commit", set_in(("ddtree", "commit"), "c96427a"), "gpuhosts:benchmarks[0].ddtree.commit",
     "not a full commit"),
    ("patch outside the project's patches", set_in(("ddtree", "patch", "file"), "../../etc/passwd"),
     "gpuhosts:benchmarks[0].ddtree.patch.file", "put it in stacks/patches/NAME.patch"),
    ("missing patch", set_in(("ddtree", "patch", "file"), "stacks/patches/missing.patch"),
     "gpuhosts:benchmarks[0].ddtree.patch.file", "does not exist in the project"),
    ("patch digest differs", set_in(("ddtree", "patch", "sha256"), "0" * 64), "gpuhosts:benchmarks[0].ddtree.patch.sha256",
     "review the patch and put in its digest"),
    ("reference environment lacks datasets", set_in(("ddtree", "environmentOf"), "qwen-vllm-dflash"),
     "gpuhosts:benchmarks[0].ddtree.environmentOf", "lacks datasets"),
    ("reference environment not compared", set_in(("ddtree", "environmentOf"), "other"),
     "gpuhosts:benchmarks[0].ddtree.environmentOf", "is not one of this benchmark's services"),
    ("no DDTree lock for the commit", set_in(("ddtree", "commit"), "0" * 40), "gpuhosts:benchmarks[0].ddtree.commit",
     "no lock locks/ddtree/0000000-py3.12.txt"),
    ("no DDTree lock for the Python", set_in(("ddtree", "python"), "3.13"), "gpuhosts:benchmarks[0].ddtree.python",
     "(locked for: c96427a-py3.12.txt); run `python tests/verify_ddtree/run.py --lock`"),
    ("the reference's environment is a service's", lambda v: v["services"][1].update(name="ddtree-spec-bakeoff"),
     "gpuhosts:benchmarks[0].name", "is also the environment of service ddtree-spec-bakeoff"),
    ("unknown data set", set_in(("ddtree", "dataset"), "sharegpt"), "gpuhosts:benchmarks[0].ddtree.dataset",
     "is not a data set DDTree's benchmark.py loads"),
    ("samples without a data set", set_in(("ddtree", "maxSamples"), 16), "gpuhosts:benchmarks[0].ddtree",
     "maxSamples limits a data set, and no dataset is set"),
    ("a chat mode that is not a boolean", set_in(("thinking",), "maybe"), "gpuhosts:benchmarks[0].thinking",
     'must be true or false, not "maybe"'),
    ("reference drafter directory taken", set_in(("ddtree", "drafter"), {
        "repo": "z-lab/other-drafter", "localDir": "/srv/models/Qwen3.6-27B-DFlash"}),
     "gpuhosts:benchmarks[0].ddtree.drafter.localDir", "is also qwen-vllm-dflash's drafter directory"),
    ("two benchmarks of one name", lambda v: v["benchmarks"].append(copy.deepcopy(bench(v))),
     "gpuhosts:benchmarks[1].name", "is already declared as benchmarks[0]"),
]


@pytest.mark.parametrize("case, mutate, path, words", BAD, ids=[c[0] for c in BAD])
def test_a_bad_benchmark_is_refused_naming_the_field(kpro5, case, mutate, path, words):
    mutate(kpro5)
    with pytest.raises(ConfigError) as caught:
        validate_stack(kpro5, KPRO5_SECRETS)
    matching = [p for p in caught.value.problems if p.path == path]
    assert matching, f"no problem at {path}: {caught.value}"
    assert any(words in p.message for p in matching), str(caught.value)


def test_a_gated_reference_drafter_needs_the_hf_token(kpro5):
    kpro5["services"] = kpro5["services"][:1]
    bench(kpro5)["services"] = ["qwen-sglang"]
    with pytest.raises(ConfigError) as caught:
        validate_stack(kpro5, KPRO5_SECRETS - {"hfToken"})
    assert any(p.path == "gpuhosts:benchmarks[0].ddtree.drafter.gated" and "hfToken" in p.message
               for p in caught.value.problems), str(caught.value)


def test_a_benchmark_changes_only_its_own_unit_and_a_run_id_changes_its_script(kpro5):
    before = plan_host(validate_stack(kpro5, KPRO5_SECRETS))
    bench(kpro5)["runId"] = "again-1"
    after = plan_host(validate_stack(kpro5, KPRO5_SECRETS))
    changed = [u.key for u in after if u.ensure != before[u.key].ensure]
    assert changed == ["ct129-bench-spec-bakeoff"]
    assert after[changed[0]].desired != before[changed[0]].desired


def test_without_benchmarks_the_plan_has_no_benchmark_unit(kpro5):
    kpro5.pop("benchmarks")
    graph = plan_host(validate_stack(kpro5, KPRO5_SECRETS))
    assert not [u for u in graph if u.kind in ("Benchmark", "DDTreeCheckout")]
    assert summarize_host(validate_stack(kpro5, KPRO5_SECRETS))["containers"]["129"]["benchmarks"] == {}


def test_kpro5_has_no_accelerate_warning_because_ddtree_runs_in_its_own_lock_which_holds_it(kpro5):
    config = validate_stack(kpro5, KPRO5_SECRETS)
    assert not [w for w in config.warnings() if "accelerate" in w]
    unit = plan_host(config)["ct129-env-ddtree-spec-bakeoff"]
    assert unit.kind == "PythonEnv"
    # The probe reads the venv's dist-info against the lock's pins, accelerate among them, as for the engines.
    assert unit.desired["transformers in /opt/gpuhosts/ddtree-spec-bakeoff/venv"] == "transformers 5.17.0"
    assert "accelerate==1.15.0" in unit.ensure


def test_a_stack_that_still_lends_a_service_environment_is_warned_about_accelerate(kpro5):
    bench(kpro5)["ddtree"]["environmentOf"] = "qwen-sglang"
    config = validate_stack(kpro5, KPRO5_SECRETS)
    (found,) = [w for w in config.warnings() if w.startswith("gpuhosts:benchmarks[0].ddtree.environmentOf:")]
    assert "device_map, which needs accelerate" in found and "qwen-sglang has none" in found
    graph = plan_host(config)
    assert "ct129-env-ddtree-spec-bakeoff" not in [u.key for u in graph]
    assert "/opt/gpuhosts/qwen-sglang/venv/bin/python" in graph["ct129-bench-spec-bakeoff"].ensure
