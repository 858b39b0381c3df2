"""A small inference-engine stand-in: /health, /v1/models, /v1/chat/completions (plain and streamed) and /metrics
with the engines' real metric names. The deploy gate's tests serve it in-process (`start_engine`); on the simulated
host with `serve_engines` on, the engine a unit's ExecStart names is built from its own command line
(`Engine.from_flags`, called by tests/fakehost/engines.py) and serves from a process of its own.

Responses take the shape of one engine release, from tests/fixtures/gate/<engine>-<version>.json (built with that
release's own response classes by tests/fixtures/gate/generate.py): Qwen3.6 thinks first, so the smoke reply
carries only reasoning and the stream starts with reasoning deltas, in the field that release names.

The stand-in's tokenizer: a prompt has as many tokens as its messages' contents have whitespace-separated words;
that count is `usage.prompt_tokens`, and what the context-length checks compare."""

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
vllm:num_requests_running{{engine="0",model_name="{model}"}} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="{model}"}} {generated}
"""
VLLM_SPEC_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} {drafts}
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{model}"}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{model}"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{model}",position="0"}} {accepted}
"""
VLLM_TTFT_METRICS = """\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="{model}"}} 3.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="1.0",model_name="{model}"}} 7.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="{model}"}} 8.0
vllm:time_to_first_token_seconds_count{{engine="0",model_name="{model}"}} 8.0
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{model}"}} 2.75
"""
# What /metrics still shows with --disable-log-stats: the HTTP instrumentator's own series, no vllm: series
# (vllm 0.26.0 v1/engine/async_llm.py AsyncLLM.__init__ makes no StatLoggerManager without log_stats, so no
# PrometheusStatLogger registers them; serve/instrumentator/metrics.py attach_router mounts /metrics regardless).
VLLM_HTTP_METRICS = """\
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{{handler="/v1/chat/completions",method="POST",status="2xx"}} {requests}
"""

SGLANG_METRICS = """\
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{engine_type="unified",model_name="{model}",tp_rank="0",dp_rank="0"}} 61.3
sglang:gen_throughput{{engine_type="unified",model_name="{model}",tp_rank="1",dp_rank="0"}} 61.3
"""
SGLANG_SPEC_METRICS = """\
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{engine_type="unified",model_name="{model}",tp_rank="0",dp_rank="0"}} {length}
sglang:spec_accept_length{{engine_type="unified",model_name="{model}",tp_rank="1",dp_rank="0"}} {length}
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{engine_type="unified",model_name="{model}",tp_rank="0",dp_rank="0"}} {rate}
sglang:spec_accept_rate{{engine_type="unified",model_name="{model}",tp_rank="1",dp_rank="0"}} {rate}
"""
SGLANG_COUNTERS = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{engine_type="unified",model_name="{model}"}} {generated}
"""
# The prompt length at which `long_context_slowdown` applies in full.
LONG_CONTEXT = 120000


def prompt_tokens(body: dict) -> int:
    """The stand-in's tokenizer: whitespace-separated words of every message's content (text parts of a list)."""
    words = 0
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        words += sum(len(str(part.get("text") or "").split()) for part in parts if isinstance(part, dict))
    return words


def error_body(kind: str, message: str, status: int, err_type: str, param: str | None = None) -> dict:
    """Each engine's error JSON: vLLM 0.26.0 entrypoints/openai/engine/protocol.py ErrorResponse (an `error` object,
    built by serve/utils/error_response.py create_error_response); SGLang 0.5.11 entrypoints/openai/serving_base.py
    create_error_response (a flat ErrorResponse)."""
    if kind == "vllm":
        return {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": status}


class Engine:
    """The engine's behaviour: its kind, health, speed, and what each verify step accepts.

    The keywords after `version` default to what the deploy gate's tests always had (one served name, metrics and
    speculative counters on, thinking in the reasoning field, no length limit) and to tool calls parsed as the
    committed stacks ask (qwen3_coder); `from_flags` sets them from an engine's command line."""

    def __init__(self, kind="vllm", health=200, token_delay=0.0005, tokens=64, accept_rate=0.4,
                 sglang_length=3.4, sglang_rate=0.8, key=None, speculative_tokens=15, version=None, *,
                 served=(MODEL,), metrics=True, log_stats=True, speculative=True, context_length=None,
                 tool_parser="qwen3_coder", auto_tools=True, reasoning=True, slowdown=0.0, expect_temperature=0,
                 loop=None, calls_unparsed=False):
        self.kind, self.health, self.token_delay, self.tokens = kind, health, token_delay, tokens
        self.shapes = release_shapes(kind, version)
        self.accept_rate, self.sglang_length, self.sglang_rate, self.key = accept_rate, sglang_length, sglang_rate, key
        self.k = speculative_tokens
        self.served, self.metrics_on, self.log_stats, self.speculative = list(served), metrics, log_stats, speculative
        self.context_length, self.tool_parser, self.auto_tools = context_length, tool_parser, auto_tools
        self.reasoning, self.slowdown, self.expect_temperature = reasoning, slowdown, expect_temperature
        # The known failure modes: `loop`, a phrase the text repeats after its first words until max_tokens
        # (sgl-project/sglang #35723, vllm-project/vllm #50837); `calls_unparsed`, a tool call left in the thinking
        # text, unparsed, as SGLang with NEXTN, tools and thinking does (sgl-project/sglang #36537).
        self.loop, self.calls_unparsed = loop, calls_unparsed
        # Traffic before the gate, with another acceptance, which the gate must not count.
        self.drafts, self.draft_tokens, self.accepted, self.generated = 500.0, 7500.0, 6000.0, 20000.0
        self.requests = 0
        # sglang's --admin-api-key; None: its admin endpoints take the API key (or nothing, without one). An SGLang
        # as gpuhosts starts it has one that no client holds.
        self.admin_key = "admin-key-no-client-holds" if kind == "sglang" else None
        self.lock = threading.Lock()

    @classmethod
    def from_flags(cls, kind: str, args, key: str | None, behaviour: dict | None = None) -> "Engine":
        """The engine an argparse namespace of its flags describes (tests/fakehost/engines.py parses them), with
        the test's behaviour knobs (`engine_behaviour` of the host settings) for what no flag decides."""
        b = dict(behaviour or {})
        common = dict(token_delay=float(b.get("token_delay", 0.0005)), tokens=int(b.get("tokens", 64)), key=key,
                      served=args.served_model_name, context_length=args.context_length,
                      tool_parser=args.tool_call_parser, reasoning=bool(args.reasoning_parser),
                      slowdown=float(b.get("long_context_slowdown", 0.0)), expect_temperature=None,
                      health=503 if b.get("fail") == "health" else 200)
        if kind == "sglang":
            # sglang 0.5.11 srt/observability/scheduler_metrics_mixin.py log_decode_stats: the length is accepted
            # tokens per verify step, the verified token included (at most num_steps + 1); without an algorithm
            # both gauges read 0 (metrics_collector.py SchedulerMetricsCollector registers them regardless).
            length, rate = float(b.get("acceptance_length", 3.4)), float(b.get("acceptance_rate", 0.8))
            if not args.speculative_algorithm:
                length, rate = 0.0, 0.0
            elif args.speculative_num_steps is not None:
                length = min(length, args.speculative_num_steps + 1.0)
            return cls(kind="sglang", sglang_length=length, sglang_rate=rate, metrics=args.enable_metrics,
                       speculative=bool(args.speculative_algorithm), **common)
        spec = json.loads(args.speculative_config) if args.speculative_config else None
        return cls(kind="vllm", accept_rate=float(b.get("accept_rate", 0.4)),
                   speculative_tokens=int((spec or {}).get("num_speculative_tokens") or 1),
                   speculative=spec is not None, log_stats=not args.disable_log_stats,
                   auto_tools=args.enable_auto_tool_choice, **common)

    @property
    def model(self) -> str:
        return self.served[0]

    def decode(self, tokens):
        with self.lock:
            self.requests += 1
            self.generated += tokens
            if not self.speculative:
                return
            drafts = tokens / (1 + self.accept_rate * self.k)
            self.drafts += drafts
            self.draft_tokens += drafts * self.k
            self.accepted += drafts * self.k * self.accept_rate

    def metrics(self):
        with self.lock:
            if self.kind == "sglang":
                return (SGLANG_METRICS + SGLANG_SPEC_METRICS + SGLANG_COUNTERS).format(model=self.model, length=self.sglang_length,
                                                       rate=self.sglang_rate, generated=self.generated)
            if not self.log_stats:
                return VLLM_HTTP_METRICS.format(requests=float(self.requests))
            text = VLLM_METRICS + (VLLM_SPEC_METRICS if self.speculative else "") + VLLM_TTFT_METRICS
            return text.format(model=self.model, drafts=self.drafts, draft_tokens=self.draft_tokens,
                               accepted=self.accepted, generated=self.generated)

    def token_pause(self, prompt: int) -> float:
        """Per-token delay: decode at LONG_CONTEXT prompt tokens runs `1 - slowdown` as fast as at none."""
        speed = 1.0 - self.slowdown * min(prompt / LONG_CONTEXT, 1.0)
        return self.token_delay / max(speed, 0.01)

    def refusal(self, body: dict, prompt: int) -> tuple[int, dict] | None:
        """The engine's own answer to a request it does not serve, or None."""
        model = body.get("model")
        if self.kind == "vllm" and model and model not in self.served:
            # vllm 0.26.0 entrypoints/serve/engine/serving.py BaseServing._check_model; SGLang 0.5.11 checks no
            # model name on chat requests (entrypoints/openai/serving_chat.py echoes request.model).
            return 404, error_body("vllm", f"The model `{model}` does not exist.", 404, "NotFoundError", "model")
        tools, choice = body.get("tools"), body.get("tool_choice")
        if self.kind == "vllm" and tools and self.tool_parser is None and choice == "auto" and not self.auto_tools:
            # vllm 0.26.0 renderers/online_renderer.py OnlineRenderer.render_chat
            return 400, error_body("vllm", '"auto" tool choice requires --enable-auto-tool-choice and '
                                   "--tool-call-parser to be set", 400, "BadRequestError")
        limit, out = self.context_length, body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is None:
            return None
        if self.kind == "vllm":
            # vllm 0.26.0 renderers/params.py TokenizeParams._token_len_check
            wanted = out or 0
            if prompt > limit - wanted:
                return 400, error_body("vllm", f"This model's maximum context length is {limit} tokens. However, you "
                                       f"requested {wanted} output tokens and your prompt contains {prompt} input "
                                       f"tokens, for a total of {prompt + wanted} tokens. Please reduce the length "
                                       "of the input prompt or the number of requested output tokens.", 400,
                                       "BadRequestError", "input_tokens")
            return None
        # sglang 0.5.11 srt/managers/tokenizer_manager.py TokenizerManager._validate_one_request (a ValueError that
        # serving_chat.py _handle_streaming_request and serving_base.py handle_request answer with 400)
        err_type = "BadRequestError" if body.get("stream") else "BadRequest"
        if prompt >= limit:
            return 400, error_body("sglang", f"The input ({prompt} tokens) is longer than the model's context length "
                                   f"({limit} tokens).", 400, err_type)
        if out is not None and out + prompt > limit:
            return 400, error_body("sglang", "Requested token count exceeds the model's maximum context length of "
                                   f"{limit} tokens. You requested a total of {out + prompt} tokens: {prompt} tokens "
                                   f"from the input messages and {out} tokens for the completion. Please reduce the "
                                   "number of tokens in the input messages or the completion to fit within the "
                                   "limit.", 400, err_type)
        return None

    def tool_call(self, body: dict) -> dict | None:
        """The call a tool-calling reply makes, when a parser turns it into `tool_calls`; None without tools."""
        tools = body.get("tools") or []
        if not tools or body.get("tool_choice") == "none":
            return None
        function = tools[0].get("function", {})
        required = (function.get("parameters") or {}).get("required") or ["city"]
        return {"name": function.get("name", "tool"), "arguments": json.dumps({required[0]: "Bergen"})}


def call_text(call: dict) -> str:
    """A Qwen3-Coder style call as the model writes it, which is what a reply holds without a parser."""
    args = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in json.loads(call["arguments"]).items())
    return f"<tool_call>\n<function={call['name']}>\n{args}</function>\n</tool_call>"


def delta_chunk(thinking: dict, field: str, model: str, **delta) -> dict:
    """A stream chunk shaped like the fixture's thinking chunk with `delta` in place of its text: SGLang's chunks
    carry every key (unset ones null), vLLM's only those set (exclude_unset)."""
    chunk = deepcopy(thinking)
    chunk["model"] = model
    d = chunk["choices"][0]["delta"]
    full = "content" in d
    for key in (field, "content", "tool_calls"):
        if full:
            d[key] = None
        else:
            d.pop(key, None)
    d.update(delta)
    return chunk


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
            # vllm 0.26.0 entrypoints/serve/utils/server_utils.py AuthenticationMiddleware (only /v1, /v2,
            # /inference guarded); sglang 0.5.11 srt/utils/auth.py decide_request_auth (/health*, /metrics* open):
            # both answer 401 {"error": "Unauthorized"}.
            if engine.key and self.headers.get("Authorization") != f"Bearer {engine.key}":
                self.send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self):
            if self.path == "/health":
                self.send(engine.health, "" if engine.health == 200 else "engine dead", "text/plain")
            elif self.path == "/metrics":
                if engine.metrics_on:
                    self.send(200, engine.metrics(), "text/plain; version=0.0.4")
                else:
                    # sglang 0.5.11 srt/entrypoints/http_server.py lifespan: /metrics is mounted
                    # (utils/common.py add_prometheus_middleware) only with --enable-metrics.
                    self.send(404, {"detail": "Not Found"})
            elif self.path == "/v1/models" and self.authorised():
                self.send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": engine.kind}
                                                           for name in engine.served]})
            elif not self.path.startswith("/v1/models"):
                self.send(404, {"detail": "Not Found"})

        def admin(self):
            # sglang 0.5.11 srt/utils/auth.py decide_request_auth, ADMIN_OPTIONAL (/flush_cache among them): the
            # admin key once set, else the API key, else open.
            wanted = engine.admin_key or engine.key
            if wanted and self.headers.get("Authorization") != f"Bearer {wanted}":
                self.send(401, {"error": "Unauthorized"})
            else:
                self.send(200, "Cache flushed.\n", "text/plain")

        def do_POST(self):
            if engine.kind == "sglang" and self.path == "/flush_cache":
                self.admin()
                return
            if self.path != "/v1/chat/completions" or not self.authorised():
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if engine.expect_temperature is not None:
                assert body["model"] == MODEL and body["temperature"] == engine.expect_temperature
            prompt = prompt_tokens(body)
            refused = engine.refusal(body, prompt)
            if refused:
                self.send(*refused)
                return
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
            tokens = min(engine.tokens, limit) if limit else engine.tokens
            model = body.get("model") or engine.model
            call = engine.tool_call(body)
            if not body.get("stream"):
                message = deepcopy(engine.shapes["message"])
                message["model"] = model
                message["usage"].update(prompt_tokens=prompt, completion_tokens=tokens, total_tokens=prompt + tokens)
                engine.decode(tokens)
                self.send(200, message)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            stream = engine.shapes["stream"]
            thinking = stream[1]
            field = reasoning_field(thinking)
            pause = engine.token_pause(prompt)
            thinking_tokens = tokens - 1 if call else tokens
            for i in range(thinking_tokens):
                time.sleep(pause)
                # Without a reasoning parser the thinking is plain content (Qwen3's template opens <think> itself).
                word = f"t{i}" if engine.loop is None or i < 8 else engine.loop
                text = f"{word} " + ("</think>\n\n" if not engine.reasoning and i == thinking_tokens - 1 else "")
                chunk = delta_chunk(thinking, field, model, **{field if engine.reasoning else "content": text})
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            if call:
                time.sleep(pause)
                if engine.calls_unparsed:
                    delta = {field if engine.reasoning else "content": call_text(call)}
                elif engine.tool_parser:
                    delta = {"tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": call}]}
                else:
                    delta = {"content": call_text(call)}
                chunk = delta_chunk(thinking, field, model, **delta)
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            engine.decode(tokens)
            usage = deepcopy(stream[-1])
            usage["model"] = model
            usage["usage"].update(prompt_tokens=prompt, completion_tokens=tokens, total_tokens=prompt + tokens)
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True
    return Handler


def start_engine(engine: Engine, port: int = 0, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve `engine` on `host`:`port` (0: any free port) from a daemon thread; shut it down when done."""
    server = ThreadingHTTPServer((host, port), handler_for(engine))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
