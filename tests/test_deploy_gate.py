"""DeployGate against a small engine stand-in on 127.0.0.1 that speaks /health, /v1/models, /v1/chat/completions
(plain and streamed) and /metrics with the engines' real metric names: the gate passes a healthy service and fails
the 1.1 % acceptance case, a slow engine and a dead one."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.gate_probe import (
    GateSettings,
    acceptance,
    gate_command,
    gate_settings,
    metric_samples,
    render_gate_script,
    run_gate,
)
from services_data import kpro5_services

MODEL = "qwen3.6-27b"
KEY = "sk-gate-test-7c21"

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="qwen3.6-27b"}} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="qwen3.6-27b"}} {generated}
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="qwen3.6-27b"}} {drafts}
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="qwen3.6-27b"}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="qwen3.6-27b"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="qwen3.6-27b",position="0"}} {accepted}
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="qwen3.6-27b"}} 3.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="1.0",model_name="qwen3.6-27b"}} 7.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="qwen3.6-27b"}} 8.0
vllm:time_to_first_token_seconds_count{{engine="0",model_name="qwen3.6-27b"}} 8.0
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="qwen3.6-27b"}} 2.75
"""

SGLANG_METRICS = """\
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{engine_type="unified",model_name="qwen3.6-27b",tp_rank="0",dp_rank="0"}} 61.3
sglang:gen_throughput{{engine_type="unified",model_name="qwen3.6-27b",tp_rank="1",dp_rank="0"}} 61.3
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{engine_type="unified",model_name="qwen3.6-27b",tp_rank="0",dp_rank="0"}} {length}
sglang:spec_accept_length{{engine_type="unified",model_name="qwen3.6-27b",tp_rank="1",dp_rank="0"}} {length}
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{engine_type="unified",model_name="qwen3.6-27b",tp_rank="0",dp_rank="0"}} {rate}
sglang:spec_accept_rate{{engine_type="unified",model_name="qwen3.6-27b",tp_rank="1",dp_rank="0"}} {rate}
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{engine_type="unified",model_name="qwen3.6-27b"}} 48211.0
"""


class Engine:
    """The engine's behaviour: its kind, health, speed, and what each verify step accepts."""

    def __init__(self, kind="vllm", health=200, token_delay=0.0005, tokens=64, accept_rate=0.4,
                 sglang_length=3.4, sglang_rate=0.8, key=None, speculative_tokens=15):
        self.kind, self.health, self.token_delay, self.tokens = kind, health, token_delay, tokens
        self.accept_rate, self.sglang_length, self.sglang_rate, self.key = accept_rate, sglang_length, sglang_rate, key
        self.k = speculative_tokens
        # Traffic before the gate, with another acceptance, which the gate must not count.
        self.drafts, self.draft_tokens, self.accepted, self.generated = 500.0, 7500.0, 6000.0, 20000.0
        self.lock = threading.Lock()

    def decode(self, tokens):
        with self.lock:
            drafts = tokens / (1 + self.accept_rate * self.k)
            self.drafts += drafts
            self.draft_tokens += drafts * self.k
            self.accepted += drafts * self.k * self.accept_rate
            self.generated += tokens

    def metrics(self):
        if self.kind == "sglang":
            return SGLANG_METRICS.format(length=self.sglang_length, rate=self.sglang_rate)
        with self.lock:
            return VLLM_METRICS.format(drafts=self.drafts, draft_tokens=self.draft_tokens, accepted=self.accepted,
                                       generated=self.generated)


def handler_for(engine: Engine):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, status, body, content_type="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self):
            if engine.key and self.headers.get("Authorization") != f"Bearer {engine.key}":
                self.send(401, {"error": "invalid api key"})
                return False
            return True

        def do_GET(self):
            if self.path == "/health":
                self.send(engine.health, "" if engine.health == 200 else "engine dead", "text/plain")
            elif self.path == "/metrics":
                self.send(200, engine.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models" and self.authorised():
                self.send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": engine.kind}]})

        def do_POST(self):
            if self.path != "/v1/chat/completions" or not self.authorised():
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["model"] == MODEL and body["temperature"] == 0
            if not body.get("stream"):
                self.send(200, {"object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ready"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(engine.tokens):
                time.sleep(engine.token_delay)
                chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            engine.decode(engine.tokens)
            usage = {"object": "chat.completion.chunk", "choices": [],
                     "usage": {"prompt_tokens": 40, "completion_tokens": engine.tokens, "total_tokens": 40 + engine.tokens}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True
    return Handler


@pytest.fixture
def serve():
    servers = []

    def start(engine: Engine) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(engine))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def settings(url, engine="vllm", **overrides):
    values = dict(base_url=url, model=MODEL, engine=engine, speculative=True, min_acceptance_length=2.5,
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
    assert acceptance("vllm", Engine().metrics()).rate == pytest.approx(0.8)
    assert acceptance("sglang", "") == acceptance("vllm", "")


def test_gate_settings_of_the_kpro5_services_carry_no_secret():
    sglang, vllm = kpro5_services()
    assert gate_settings(sglang) | {"min_acceptance_rate": None} == {
        "base_url": "http://127.0.0.1:30000", "model": MODEL, "engine": "sglang", "speculative": True,
        "min_acceptance_length": 2.0, "min_acceptance_rate": None, "min_decode_tokens_per_s": 20.0, "max_tokens": 256,
        "ready_timeout_s": 1800}
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
                                "ready_timeout_s": 5})
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
