"""DeployGate against a small engine stand-in on 127.0.0.1 that speaks /health, /v1/models, /v1/chat/completions
(plain and streamed) and /metrics with the engines' real metric names: the gate passes a healthy service and fails
the 1.1 % acceptance case, a slow engine and a dead one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuhosts.compat_data import engine_facts
from gpuhosts.engines import DRIVERS
from gpuhosts.plans.deploy_gate import gate_command, gate_settings
from gpuhosts.hostside.gate_probe import (GateSettings, acceptance, has_text, metric_samples, repetition_loop,
                                         run_gate)
from gpuhosts.plans.gate_script import render_gate_script
from engine_standin import MODEL, PINNED, SHAPES, Engine, release_shapes, start_engine
from services_data import kpro5_services

KEY = "sk-gate-test-7c21"


@pytest.fixture
def serve():
    servers = []

    def start(engine: Engine) -> str:
        server = start_engine(engine)
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def settings(url, engine="vllm", version=None, **overrides):
    """The gate's settings as the engine's driver gives them for that release."""
    driver = DRIVERS[engine]
    values = dict(base_url=url, model=MODEL, engine=engine, speculative=True, min_acceptance_length=2.5,
                  reasoning_field=engine_facts(engine, version or PINNED[engine]).reasoning_field,
                  acceptance_metrics=driver.acceptance_metrics(),
                  min_decode_tokens_per_s=20, max_tokens=64, ready_timeout_s=0.3, poll_interval_s=0.05,
                  request_timeout_s=10)
    values.update(overrides)
    return GateSettings(**values)


def test_healthy_vllm_dflash_passes(serve):
    result = run_gate(settings(serve(Engine(accept_rate=0.4))))
    assert result.passed, result.failures
    assert result.healthy and result.model_listed and result.smoke_ok and result.completion_tokens == 64
    assert result.acceptance_rate == pytest.approx(0.4)
    assert result.acceptance_length == pytest.approx(1 + 0.4 * 15)
    assert result.decode_tokens_per_s > 20


def test_the_seeds_one_percent_acceptance_fails(serve):
    """A guessed target_layer_ids: the drafter still drafts 15 tokens, 1.1 % of them are accepted."""
    result = run_gate(settings(serve(Engine(accept_rate=0.011))))
    assert not result.passed
    assert result.acceptance_rate == pytest.approx(0.011)
    assert result.failures == ["acceptance length 1.17 < 2.50", "acceptance rate 1.1% < 10.0%"]


def test_earlier_traffic_does_not_hide_a_bad_drafter(serve):
    """Counters are cumulative: 80 % accepted before the gate must not lift the 1.1 % measured now."""
    engine = Engine(accept_rate=0.011)
    assert engine.accepted / engine.draft_tokens == 0.8
    assert run_gate(settings(serve(engine))).acceptance_rate == pytest.approx(0.011)


def test_healthy_sglang_mtp_passes_on_its_gauges(serve):
    result = run_gate(settings(serve(Engine(kind="sglang")), engine="sglang", min_acceptance_length=2.0))
    assert result.passed, result.failures
    assert (result.acceptance_length, result.acceptance_rate) == (pytest.approx(3.4), pytest.approx(0.8))


def test_sglang_with_spec_decoding_that_accepts_nothing_fails(serve):
    result = run_gate(settings(serve(Engine(kind="sglang", sglang_length=1.02, sglang_rate=0.007)), engine="sglang"))
    assert not result.passed and "acceptance length 1.02 < 2.50" in result.failures


def test_dead_engine_fails(serve):
    result = run_gate(settings(serve(Engine(health=503))))
    assert not result.passed and not result.healthy
    assert result.failures == ["engine not healthy after 0.3 s: /health answered 503"]


def test_engine_that_never_listens_fails(serve):
    url = serve(Engine())
    closed = url.rsplit(":", 1)[0] + ":1"
    result = run_gate(settings(closed))
    assert not result.passed and "unreachable" in result.failures[0]


def test_slow_decode_fails(serve):
    result = run_gate(settings(serve(Engine(tokens=8, token_delay=0.1))))
    assert not result.passed
    assert any(f.startswith("decode ") and f.endswith("tokens/s < 20") for f in result.failures), result.failures


def test_without_speculative_decoding_only_speed_counts(serve):
    result = run_gate(settings(serve(Engine(kind="sglang", sglang_length=1.0, sglang_rate=0.0)), engine="sglang",
                               speculative=False, min_acceptance_length=None))
    assert result.passed and result.acceptance_length is None


def test_wrong_api_key_fails(serve):
    result = run_gate(settings(serve(Engine(key=KEY)), api_key="wrong"))
    assert not result.passed and "engine stopped answering" in result.failures[0]


def test_metric_names_through_the_prometheus_parser():
    samples = metric_samples(Engine().metrics())
    assert samples["vllm:spec_decode_num_drafts_total"] == [({"engine": "0", "model_name": MODEL}, 500.0)]
    assert "vllm:time_to_first_token_seconds_bucket" in samples
    vllm, sglang = DRIVERS["vllm"].acceptance_metrics(), DRIVERS["sglang"].acceptance_metrics()
    assert acceptance(vllm, Engine().metrics()).rate == pytest.approx(0.8)
    assert acceptance(sglang, "") == acceptance(vllm, "")


RELEASES = sorted(path.stem.split("-", 1) for path in SHAPES.glob("*.json"))


@pytest.mark.parametrize("engine,version", RELEASES, ids=["-".join(r) for r in RELEASES])
def test_each_release_shape_counts_thinking_as_text_in_its_own_field(serve, engine, version):
    """Qwen3.6 thinks first: the smoke reply is all reasoning. The field comes from the compatibility data for that
    release, and the chunks are the release's own response classes (tests/fixtures/gate/generate.py)."""
    shapes = release_shapes(engine, version)
    field = engine_facts(engine, version).reasoning_field
    message = shapes["message"]["choices"][0]["message"]
    assert message["content"] is None and has_text(message, field)
    result = run_gate(settings(serve(Engine(kind=engine, version=version)), engine=engine, version=version,
                               min_acceptance_length=1.0))
    assert result.smoke_ok and result.decode_tokens_per_s is not None, result.failures


@pytest.mark.parametrize("engine,version", RELEASES, ids=["-".join(r) for r in RELEASES])
def test_reading_the_other_engines_field_sees_no_text(serve, engine, version):
    """The defect this guards: a gate reading `reasoning_content` from vLLM (or `reasoning` from SGLang) sees an
    empty reply and a stream without tokens."""
    other = {"vllm": "sglang", "sglang": "vllm"}[engine]
    wrong = engine_facts(other, PINNED[other]).reasoning_field
    result = run_gate(settings(serve(Engine(kind=engine, version=version)), engine=engine, version=version,
                               reasoning_field=wrong))
    assert not result.smoke_ok and "the smoke request returned no text" in result.failures
    assert result.decode_tokens_per_s is None


def test_gate_settings_of_the_kpro5_services_carry_no_secret():
    sglang, vllm = kpro5_services()
    assert gate_settings(sglang) | {"min_acceptance_rate": None} == {
        "base_url": "http://127.0.0.1:30000", "model": MODEL, "engine": "sglang", "speculative": True,
        "min_acceptance_length": 2.0, "min_acceptance_rate": None, "min_decode_tokens_per_s": 20.0, "max_tokens": 256,
        "ready_timeout_s": 1800, "reasoning_field": "reasoning_content", "admin_endpoint": "/flush_cache",
        "tool_call": True,
        "acceptance_metrics": {"kind": "gauges", "length": "sglang:spec_accept_length",
                               "rate": "sglang:spec_accept_rate"}}
    assert gate_settings(vllm)["reasoning_field"] == "reasoning"
    command = gate_command(vllm)
    assert command[-2:] == ["/etc/gpuhosts/qwen-vllm-dflash.env", "VLLM_API_KEY"]
    assert "api_key" not in command[2]


def test_rendered_gate_script_runs_in_the_container_shape(serve, tmp_path):
    """The script the container receives, run as the host would run it: key from the 0600 file, never in output."""
    script = tmp_path / "deploy-gate.py"
    script.write_text(render_gate_script().content)
    env_file = tmp_path / "svc.env"
    env_file.write_text(f"VLLM_API_KEY={KEY}\n")
    env_file.chmod(0o600)
    url = serve(Engine(key=KEY))
    settings_json = json.dumps({"base_url": url, "model": MODEL, "engine": "vllm", "speculative": True,
                                "min_acceptance_length": 2.5, "min_decode_tokens_per_s": 20, "max_tokens": 64,
                                "ready_timeout_s": 5, "reasoning_field": "reasoning",
                                "acceptance_metrics": DRIVERS["vllm"].acceptance_metrics()})
    ok = subprocess.run([sys.executable, str(script), settings_json, str(env_file), "VLLM_API_KEY"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "deploy gate: passed" and KEY not in ok.stdout + ok.stderr
    outputs = json.loads(ok.stdout.splitlines()[0].removeprefix("GPUHOSTS_GATE "))
    assert outputs["passed"] and outputs["acceptance_length"] == pytest.approx(7.0)
    bad = subprocess.run([sys.executable, str(script), settings_json.replace(url, url.rsplit(":", 1)[0] + ":1")
                          .replace('"ready_timeout_s": 5', '"ready_timeout_s": 0'), str(env_file), "VLLM_API_KEY"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "deploy gate: FAILED" in bad.stdout


def test_an_engine_that_answers_without_the_key_fails_the_gate(serve):
    """The key is configured, but the engine never got it (or ignores it): anyone who reaches the port uses it.
    Before, the gate sent every request with the key and passed."""
    result = run_gate(settings(serve(Engine(key=None)), api_key=KEY))
    assert not result.passed
    assert any("answered 200 to a request without the API key" in f for f in result.failures), result.failures


def test_an_engine_that_asks_for_the_key_passes_the_keyless_check(serve):
    result = run_gate(settings(serve(Engine(key=KEY)), api_key=KEY))
    assert not [f for f in result.failures if "without the API key" in f], result.failures


def sglang_with(admin_key):
    engine = Engine(kind="sglang", key=KEY)
    engine.admin_key = admin_key
    return engine


@pytest.mark.parametrize("admin_key, refused", [(None, False), ("admin-only-key-51c0", True)],
                         ids=["the API key opens the admin endpoints", "the admin key alone opens them"])
def test_the_gate_proves_the_api_key_does_not_open_the_admin_endpoints(serve, admin_key, refused):
    """SGLang without --admin-api-key lets every holder of the API key flush its cache, load weights from disk or
    start a profile (srt/utils/auth.py ADMIN_OPTIONAL); the gate fails a service whose admin key did not arrive."""
    url = serve(sglang_with(admin_key))
    result = run_gate(settings(url, engine="sglang", min_acceptance_length=2.0, api_key=KEY,
                               admin_endpoint=DRIVERS["sglang"].admin_endpoint))
    failures = [f for f in result.failures if "/flush_cache" in f]
    assert result.passed == refused
    assert failures == ([] if refused else ["/flush_cache answered 200 to the API key; the engine's admin endpoints "
                                            "must refuse it (401): check that the admin key file reaches the engine"])


def test_an_engine_without_an_admin_key_is_not_asked():
    assert DRIVERS["vllm"].admin_endpoint is None
    assert gate_settings(kpro5_services()[1])["admin_endpoint"] is None
    assert gate_settings(kpro5_services()[0])["admin_endpoint"] == "/flush_cache"


# --- the known failure modes of today's releases --------------------------------------------------------------------

@pytest.mark.parametrize("engine, tool_call, failure", [
    (Engine(kind="sglang", tool_parser="qwen3_coder", key=KEY), True, None),
    (Engine(kind="vllm", tool_parser="qwen3_coder", auto_tools=True, key=KEY), True, None),
    # sgl-project/sglang #35723 (0.5.17, Qwen3.5-architecture models): the text turns into one phrase repeated
    (Engine(kind="sglang", tool_parser="qwen3_coder", key=KEY, loop="the"), True,
     "the timed request looped on 'the'"),
    # vllm-project/vllm #50837 (DFlash on Qwen3.5): degenerate, repeating output
    (Engine(kind="vllm", tool_parser="qwen3_coder", auto_tools=True, key=KEY, loop="of the answer"), True,
     "the timed request looped on 'of the answer'"),
    # sgl-project/sglang #36537 (NEXTN + tool calls + thinking): the call stays in the text, unparsed
    (Engine(kind="sglang", tool_parser="qwen3_coder", key=KEY, calls_unparsed=True), True,
     "the tool-call request came back without a tool call"),
    # a service without a tool parser is not asked for a call
    (Engine(kind="sglang", key=KEY, calls_unparsed=True), False, None),
], ids=["sglang healthy", "vllm healthy", "sglang loop", "vllm dflash loop", "sglang call unparsed",
        "no tool parser"])
def test_the_gate_refuses_the_known_failure_modes(serve, engine, tool_call, failure):
    engine.tokens = 80
    url = serve(engine)
    result = run_gate(settings(url, engine=engine.kind, min_acceptance_length=1.5, api_key=KEY, tool_call=tool_call,
                               max_tokens=80))
    found = [f for f in result.failures if "looped" in f or "tool call" in f]
    if failure is None:
        assert found == [] and result.passed, result.failures
        assert result.tool_call_ok is (True if tool_call else None)
    else:
        assert found and found[0].startswith(failure) and not result.passed, result.failures


@pytest.mark.parametrize("text, phrase", [
    ("word " * 60, "word"),
    (" ".join(f"w{i}" for i in range(20)) + " a b c" * 20, "a b c"),
    (" ".join(f"w{i}" for i in range(200)), None),
    ("the same " * 10, None),  # too short to tell
    # prose repeats words, never one phrase for 48 words
    (("def primes(n): return the first n prime numbers, checked by trial division up to the square root. " * 3),
     None),
])
def test_a_loop_is_one_phrase_repeated_to_the_end(text, phrase):
    assert repetition_loop(text) == phrase
