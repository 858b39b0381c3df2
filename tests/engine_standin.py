"""A small inference-engine stand-in on 127.0.0.1: /health, /v1/models, /v1/chat/completions (plain and streamed)
and /metrics with the engines' real metric names, for the deploy gate's tests.

Responses take the shape of one engine release, from tests/fixtures/gate/<engine>-<version>.json (built with that
release's own response classes by tests/fixtures/gate/generate.py): Qwen3.6 thinks first, so the smoke reply
carries only reasoning and the stream starts with reasoning deltas, in the field that release names."""

from __future__ import annotations

import json
import threading
import time
from copy import deepcopy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODEL = "qwen3.6-27b"
SHAPES = Path(__file__).resolve().parent / "fixtures" / "gate"
PINNED = {"sglang": "0.5.11", "vllm": "0.26.0"}
NOT_REASONING = {"role", "content", "tool_calls"}


def release_shapes(kind: str, version: str | None = None) -> dict:
    return json.loads((SHAPES / f"{kind}-{version or PINNED[kind]}.json").read_text())


def reasoning_field(chunk: dict) -> str:
    """The delta key a fixture's thinking chunk carries its text in."""
    delta = chunk["choices"][0]["delta"]
    return next(k for k, v in delta.items() if k not in NOT_REASONING and isinstance(v, str))

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
                 sglang_length=3.4, sglang_rate=0.8, key=None, speculative_tokens=15, version=None):
        self.kind, self.health, self.token_delay, self.tokens = kind, health, token_delay, tokens
        self.shapes = release_shapes(kind, version)
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
                self.send(200, engine.shapes["message"])
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            stream = engine.shapes["stream"]
            thinking = stream[1]
            field = reasoning_field(thinking)
            for i in range(engine.tokens):
                time.sleep(engine.token_delay)
                chunk = deepcopy(thinking)
                chunk["choices"][0]["delta"][field] = f"t{i} "
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            engine.decode(engine.tokens)
            usage = deepcopy(stream[-1])
            usage["usage"].update(prompt_tokens=40, completion_tokens=engine.tokens, total_tokens=40 + engine.tokens)
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True
    return Handler



def start_engine(engine: Engine, port: int = 0) -> ThreadingHTTPServer:
    """Serve `engine` on 127.0.0.1:`port` (0: any free port) from a daemon thread; shut it down when done."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(engine))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
