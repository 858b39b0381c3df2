"""The engine drivers across releases: what changes between releases comes from the compatibility data's engines
rows, so a version bump is one changed value in the stack (the kpro5 services, with engine.version replaced)."""

from __future__ import annotations

import pytest

from gpuhosts.compat_data import engine_facts, load_rule_file
from gpuhosts.engines import DRIVERS, driver_for
from gpuhosts.plans.inference_service import engine_args, engine_environment
from services_data import kpro5_services


def bumped(index: int, version: str, **changes):
    service = kpro5_services()[index]
    return service.model_copy(update={"engine": service.engine.model_copy(update={"version": version}), **changes})


def flag_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


CASES = [
    # (service index, release, flag, its value, variables set, variables absent)
    (0, "0.5.11", "--mamba-scheduler-strategy", "extra_buffer", {}, {"SGLANG_ENABLE_SPEC_V2"}),
    (0, "0.5.23", "--mamba-radix-cache-strategy", "extra_buffer", {}, {"SGLANG_ENABLE_SPEC_V2"}),
    (0, "0.5.9", "--mamba-scheduler-strategy", "extra_buffer", {"SGLANG_ENABLE_SPEC_V2": "1"}, set()),
    (1, "0.26.0", "--tool-call-parser", "qwen3_coder", {}, {"VLLM_USE_V2_MODEL_RUNNER"}),
    (1, "0.33.0", "--tool-call-parser", "qwen3_coder", {}, {"VLLM_USE_V2_MODEL_RUNNER"}),
    (1, "0.25.1", "--tool-call-parser", "qwen3_coder", {"VLLM_USE_V2_MODEL_RUNNER": "1"}, set()),
]


@pytest.mark.parametrize("index,version,flag,value,present,absent", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_release_gets_its_flags_and_variables_from_the_engines_rows(index, version, flag, value, present, absent):
    service = bumped(index, version)
    argv, env = engine_args(service), engine_environment(service)
    assert flag_value(argv, flag) == value
    for name, wanted in present.items():
        assert env[name] == wanted
    assert not absent & set(env)


def test_the_renamed_flag_is_not_rendered_under_its_old_name():
    assert "--mamba-scheduler-strategy" not in engine_args(bumped(0, "0.5.23"))


def test_a_variable_the_stack_sets_is_kept_even_where_redundant():
    service = bumped(0, "0.5.11", environment={"SGLANG_ENABLE_SPEC_V2": "0"})
    assert engine_environment(service)["SGLANG_ENABLE_SPEC_V2"] == "0"


@pytest.mark.parametrize("engine,version,field", [("sglang", "0.5.11", "reasoning_content"),
                                                  ("sglang", "0.5.23", "reasoning_content"),
                                                  ("vllm", "0.26.0", "reasoning"), ("vllm", "0.33.0", "reasoning")])
def test_the_reasoning_field_per_release(engine, version, field):
    assert engine_facts(engine, version).reasoning_field == field


def test_a_release_the_data_knows_nothing_about_has_no_reasoning_field_and_the_gate_refuses_it():
    service = bumped(1, "0.10.0")
    with pytest.raises(ValueError, match="names no reasoning field for vllm 0.10.0"):
        driver_for(service.engine).gate(service)


def test_prs_of_a_release_come_from_the_data():
    vllm = DRIVERS["vllm"]
    assert vllm.contains(bumped(1, "0.26.0").engine, 47914)
    assert not vllm.contains(bumped(1, "0.25.1").engine, 47914)


def test_the_sglang_lock_constraint_holds_before_0_5_23_only():
    assert engine_facts("sglang", "0.5.11").lock_constraints == ("kernels>=0.14.1,<0.15",)
    assert engine_facts("sglang", "0.5.23").lock_constraints == ()


def test_every_engines_row_names_its_source_and_a_known_package():
    for row in load_rule_file().engines:
        assert row.source.strip()
        assert row.package in {*DRIVERS, "speculators"}


def test_an_unknown_engine_has_no_driver():
    with pytest.raises(ValueError, match="no driver for engine 'tgi'"):
        driver_for("tgi")


class _Histogram(type(DRIVERS["vllm"])):
    def acceptance_metrics(self):
        return {"kind": "histogram", "length": "x"}


def test_a_driver_naming_acceptance_metrics_the_gate_cannot_read_is_refused():
    with pytest.raises(ValueError, match="none the gate reads: kind gauges with length, rate; kind counters"):
        _Histogram().gate(bumped(1, "0.26.0"))


def test_the_gate_reads_each_drivers_own_kind_of_metrics():
    assert DRIVERS["sglang"].gate(bumped(0, "0.5.11"))["acceptance"]["kind"] == "gauges"
    assert DRIVERS["vllm"].gate(bumped(1, "0.26.0"))["acceptance"]["kind"] == "counters"


def test_a_driver_may_name_the_reasoning_field_every_release_shares():
    class Agreeing(type(DRIVERS["vllm"])):
        reasoning_field = "reasoning"

    assert Agreeing().gate(bumped(1, "0.10.0"))["reasoning_field"] == "reasoning"


def test_only_sglang_ships_a_launcher():
    assert [f.path for f in DRIVERS["sglang"].shipped()] == ["/usr/local/lib/gpuhosts/sglang-serve.py"]
    assert DRIVERS["vllm"].shipped() == ()
