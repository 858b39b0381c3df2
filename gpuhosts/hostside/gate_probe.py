"""The deploy gate's probe: after a service (re)starts, prove that it serves and that speculative decoding pays, or fail the deploy.

The gate waits for `/health`, checks that `/v1/models` lists the served model, sends a smoke request, times a
fixed streamed request for decode tokens/s, and reads the engine's Prometheus metrics for the acceptance of draft
tokens. What differs between engines and releases comes in the settings, from the engine's driver
(gpuhosts/engines/): the response field that carries thinking text (`reasoning_content` in SGLang, `reasoning` in
vLLM 0.26.0 and later; Qwen3.6 thinks first, so a short answer can be all reasoning), and the acceptance metrics —
gauges of length and rate (SGLang), or counters of drafts, draft tokens and accepted tokens (vLLM), taken before
and after the timed request so earlier traffic does not count. Thresholds come from the service's `gate:` settings.

This module runs in two places: imported by gpuhosts (tests, rendering) and, verbatim, as the gate script inside
the container (templates/common/hostside-script.py.j2); gpuhosts/plans/deploy_gate.py runs it, with the engine's own Python. So it needs only the standard
library and `prometheus_client`, which both engines depend on.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DEFAULT_MIN_ACCEPTANCE_LENGTH = 1.5
DEFAULT_MIN_ACCEPTANCE_RATE = 0.1
SMOKE_PROMPT = "Reply with the single word: ready"
# Fixed, so that runs compare: long enough to reach steady decode, predictable enough for drafts to be accepted.
TOOL_PROMPT = "What is the weather in Bergen right now? Use the get_weather tool."
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# Thinking comes first and takes tokens before the call.
TOOL_MAX_TOKENS = 1024
# A degenerate loop: the last LOOP_WINDOW words repeat a phrase of at most LOOP_PERIOD words.
LOOP_WINDOW = 48
LOOP_PERIOD = 12
TIMED_PROMPT = ("Write a Python function that returns the first n prime numbers, with a docstring and three "
                "doctest examples, then explain in two sentences how it works.")


@dataclass(frozen=True)
class GateSettings:
    base_url: str
    model: str
    engine: str  # the engine's name, for the report
    speculative: bool
    reasoning_field: str
    acceptance_metrics: dict[str, str]
    min_acceptance_length: float | None = None
    min_acceptance_rate: float | None = None
    min_decode_tokens_per_s: float = 10.0
    max_tokens: int = 256
    ready_timeout_s: float = 1800.0
    poll_interval_s: float = 5.0
    request_timeout_s: float = 600.0
    api_key: str | None = None
    # An administrative endpoint that takes only the engine's own admin key (gpuhosts/engines/ `admin_endpoint`).
    admin_endpoint: str | None = None
    # The service parses tool calls: the gate asks for one with thinking on.
    tool_call: bool = False

    @property
    def acceptance_length_floor(self) -> float | None:
        if self.min_acceptance_length is not None:
            return self.min_acceptance_length
        return DEFAULT_MIN_ACCEPTANCE_LENGTH if self.speculative else None

    @property
    def acceptance_rate_floor(self) -> float | None:
        if self.min_acceptance_rate is not None:
            return self.min_acceptance_rate
        return DEFAULT_MIN_ACCEPTANCE_RATE if self.speculative else None


@dataclass
class GateResult:
    passed: bool = False
    healthy: bool = False
    model_listed: bool = False
    smoke_ok: bool = False
    decode_tokens_per_s: float | None = None
    completion_tokens: int | None = None
    acceptance_length: float | None = None
    acceptance_rate: float | None = None
    tool_call_ok: bool | None = None
    failures: list[str] = field(default_factory=list)

    def outputs(self) -> dict[str, Any]:
        return asdict(self)


# --- metrics -------------------------------------------------------------------------------------------------

def metric_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text exposition, by sample name (counters keep their `_total`)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def _sum(samples: dict, name: str) -> float | None:
    values = [v for _, v in samples.get(name, [])]
    return sum(values) if values else None


def _mean(samples: dict, name: str) -> float | None:
    values = [v for _, v in samples.get(name, [])]
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class Acceptance:
    length: float | None
    rate: float | None


# The kinds of acceptance metrics `acceptance` computes, with the metric each needs by role; an engine's driver names
# one kind and its own metric names (gpuhosts/engines/).
ACCEPTANCE_KINDS = {"gauges": ("length", "rate"), "counters": ("drafts", "draft_tokens", "accepted")}


def acceptance(metrics: dict[str, str], after: str, before: str | None = None) -> Acceptance:
    """Mean acceptance length (tokens per verify step) and draft-token acceptance rate, from the metrics the
    engine's driver names: `gauges` of length and rate (averaged over ranks), or `counters` of drafts, draft tokens
    and accepted tokens, where rate = accepted / draft tokens and length = 1 + accepted / drafts over `after - before`.
    """
    now = metric_samples(after)
    if metrics["kind"] == "gauges":
        return Acceptance(length=_mean(now, metrics["length"]), rate=_mean(now, metrics["rate"]))
    earlier = metric_samples(before) if before is not None else {}

    def delta(name: str) -> float | None:
        value = _sum(now, name)
        return None if value is None else value - (_sum(earlier, name) or 0.0)

    drafts, draft_tokens, accepted = (delta(metrics[k]) for k in ACCEPTANCE_KINDS["counters"])
    rate = accepted / draft_tokens if accepted is not None and draft_tokens else None
    length = 1 + accepted / drafts if accepted is not None and drafts else None
    return Acceptance(length=length, rate=rate)


def has_text(part: dict, reasoning_field: str) -> bool:
    """A message or stream delta carries text: its answer, or its thinking in the engine's reasoning field."""
    return bool((part.get("content") or part.get(reasoning_field) or "").strip())


# --- HTTP ----------------------------------------------------------------------------------------------------

def _request(settings: GateSettings, path: str, body: dict | None = None, timeout: float | None = None):
    headers = {"Content-Type": "application/json"}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(settings.base_url.rstrip("/") + path, data=data, headers=headers)
    return urllib.request.urlopen(request, timeout=timeout or settings.request_timeout_s)


def _status(request: urllib.request.Request) -> int | str:
    """The HTTP status a request is answered with, or why none came."""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError) as error:
        return f"nothing ({getattr(error, 'reason', error)})"


def keyless_status(settings: GateSettings) -> int | str:
    """What the engine answers to a request for /v1/models without the API key."""
    return _status(urllib.request.Request(settings.base_url.rstrip("/") + "/v1/models"))


def admin_status_with_api_key(settings: GateSettings) -> int | str:
    """What the admin endpoint answers to the API key: refused (401), unless the admin key is missing."""
    return _status(urllib.request.Request(settings.base_url.rstrip("/") + settings.admin_endpoint, data=b"{}", headers={
        "Authorization": f"Bearer {settings.api_key}", "Content-Type": "application/json"}))


def wait_healthy(settings: GateSettings, clock=time.monotonic, sleep=time.sleep) -> str | None:
    """None once /health answers 200; otherwise why not, when ready_timeout_s has passed."""
    deadline = clock() + settings.ready_timeout_s
    last = "no answer"
    while True:
        try:
            with _request(settings, "/health", timeout=10) as response:
                if response.status == 200:
                    return None
                last = f"/health answered {response.status}"
        except urllib.error.HTTPError as error:
            last = f"/health answered {error.code}"
        except (urllib.error.URLError, OSError) as error:
            last = f"/health unreachable ({getattr(error, 'reason', error)})"
        if clock() >= deadline:
            return f"not healthy after {settings.ready_timeout_s:g} s: {last}"
        sleep(settings.poll_interval_s)


def _chat_body(settings: GateSettings, prompt: str, max_tokens: int, stream: bool) -> dict:
    body = {"model": settings.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def repetition_loop(text: str) -> str | None:
    """The phrase a text ends by repeating over and over, or None: how a token loop looks from outside (a model
    that keeps emitting one phrase until max_tokens). Real prose does not repeat one phrase LOOP_WINDOW words long."""
    words = text.split()
    if len(words) < LOOP_WINDOW:
        return None
    tail = words[-LOOP_WINDOW:]
    for period in range(1, LOOP_PERIOD + 1):
        if all(tail[i] == tail[i + period] for i in range(LOOP_WINDOW - period)):
            return " ".join(tail[:period])
    return None


def stream_events(response):
    """The JSON events of a streamed chat completion (server-sent `data:` lines), up to `[DONE]`."""
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


@dataclass
class Streamed:
    text: str = ""
    first: float | None = None
    last: float | None = None
    chunks: int = 0
    usage_tokens: int | None = None
    # tool calls by index: name and the arguments' pieces joined
    calls: dict[int, dict[str, str]] = field(default_factory=dict)


def stream_chat(settings: GateSettings, body: dict, clock=time.perf_counter) -> Streamed:
    """A streamed chat completion read whole: its text (thinking and answer), when tokens came, its tool calls."""
    seen = Streamed()
    with _request(settings, "/v1/chat/completions", body) as response:
        for event in stream_events(response):
            if event.get("usage"):
                seen.usage_tokens = event["usage"].get("completion_tokens")
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                for call in delta.get("tool_calls") or []:
                    entry = seen.calls.setdefault(int(call.get("index") or 0), {"name": "", "arguments": ""})
                    function = call.get("function") or {}
                    entry["name"] += function.get("name") or ""
                    entry["arguments"] += function.get("arguments") or ""
                if has_text(delta, settings.reasoning_field):
                    now = clock()
                    seen.first = now if seen.first is None else seen.first
                    seen.last = now
                    seen.chunks += 1
                    seen.text += (delta.get(settings.reasoning_field) or "") + (delta.get("content") or "")
    return seen


def timed_decode(settings: GateSettings, clock=time.perf_counter) -> tuple[float | None, int, str]:
    """Stream the fixed request; decode tokens/s between the first and the last token (prefill excluded), the
    tokens and the text."""
    seen = stream_chat(settings, _chat_body(settings, TIMED_PROMPT, settings.max_tokens, True), clock)
    tokens = seen.usage_tokens if seen.usage_tokens is not None else seen.chunks
    if seen.first is None or seen.last is None or seen.last <= seen.first or tokens < 2:
        return None, tokens, seen.text
    # With speculative decoding one chunk can carry several tokens; the usage count is the truth.
    return (tokens - 1) / (seen.last - seen.first), tokens, seen.text


def tool_call_problem(settings: GateSettings) -> str | None:
    """Why a request that needs a tool, with thinking on, did not come back as one parseable call; None if it did.
    SGLang with NEXTN, tool calls and thinking loops or leaves the call unparsed in the text (sgl-project/sglang
    #36537): an agent then gets prose where it waits for a call."""
    body = _chat_body(settings, TOOL_PROMPT, TOOL_MAX_TOKENS, True)
    body.update(tools=[WEATHER_TOOL], tool_choice="auto")
    seen = stream_chat(settings, body)
    phrase = repetition_loop(seen.text)
    if phrase is not None:
        return f"the tool-call request looped on {phrase!r}"
    if not seen.calls:
        shown = " ".join(seen.text.split()[-12:])
        return f"the tool-call request came back without a tool call (it ends: {shown!r})"
    call = seen.calls[min(seen.calls)]
    try:
        arguments = json.loads(call["arguments"] or "null")
    except ValueError:
        return f"the tool call's arguments are not JSON: {call['arguments'][:80]!r}"
    if call["name"] != "get_weather" or not isinstance(arguments, dict) or "city" not in arguments:
        return f"the tool call is not the one asked for: {call['name']}({call['arguments'][:80]})"
    return None


def run_gate(settings: GateSettings, clock=time.monotonic, sleep=time.sleep) -> GateResult:
    result = GateResult()
    why = wait_healthy(settings, clock=clock, sleep=sleep)
    if why is not None:
        result.failures.append(f"engine {why}")
        return result
    result.healthy = True
    if settings.api_key and (status := keyless_status(settings)) not in (401, 403):
        # the key is only worth something if the engine asks for it: an engine that answers without it serves
        # anyone who reaches the port
        result.failures.append(f"/v1/models answered {status} to a request without the API key; the engine must "
                               "refuse it (401): check that the key reaches the engine")
    if settings.api_key and settings.admin_endpoint and (
            status := admin_status_with_api_key(settings)) not in (401, 403):
        # every client holds the API key; the admin endpoints (weights, cache, profiling) must want another
        result.failures.append(f"{settings.admin_endpoint} answered {status} to the API key; the engine's admin "
                               "endpoints must refuse it (401): check that the admin key file reaches the engine")
    try:
        with _request(settings, "/v1/models") as response:
            listed = [m.get("id") for m in json.load(response).get("data", [])]
        result.model_listed = settings.model in listed
        if not result.model_listed:
            result.failures.append(f"/v1/models lists {listed}, not {settings.model!r}")
        with _request(settings, "/v1/chat/completions", _chat_body(settings, SMOKE_PROMPT, 16, False)) as response:
            message = (json.load(response).get("choices") or [{}])[0].get("message") or {}
        result.smoke_ok = has_text(message, settings.reasoning_field)
        if not result.smoke_ok:
            result.failures.append("the smoke request returned no text")
        before = _metrics(settings)
        result.decode_tokens_per_s, result.completion_tokens, text = timed_decode(settings)
        after = _metrics(settings)
        if (phrase := repetition_loop(text)) is not None:
            # a token loop (sgl-project/sglang #35723 on Qwen3.5-architecture models; vllm-project/vllm #50837 with
            # DFlash drafters) still decodes fast and may accept well: only the text shows it
            result.failures.append(f"the timed request looped on {phrase!r}")
        if settings.tool_call:
            problem = tool_call_problem(settings)
            result.tool_call_ok = problem is None
            if problem:
                result.failures.append(problem)
    except (urllib.error.URLError, OSError, ValueError) as error:
        result.failures.append(f"engine stopped answering: {getattr(error, 'reason', error)}")
        return result
    if settings.speculative:
        measured = acceptance(settings.acceptance_metrics, after, before)
        result.acceptance_length, result.acceptance_rate = measured.length, measured.rate
    result.failures += decide(settings, result)
    result.passed = not result.failures
    return result


def _metrics(settings: GateSettings) -> str:
    with _request(settings, "/metrics") as response:
        return response.read().decode()


def decide(settings: GateSettings, result: GateResult) -> list[str]:
    """The threshold failures of a measured result."""
    failures = []
    if result.decode_tokens_per_s is None:
        failures.append("decode rate not measured: the timed request produced fewer than two tokens")
    elif result.decode_tokens_per_s < settings.min_decode_tokens_per_s:
        failures.append(f"decode {result.decode_tokens_per_s:.1f} tokens/s < {settings.min_decode_tokens_per_s:g}")
    if not settings.speculative:
        return failures
    for label, value, floor, shown in (
            ("acceptance length", result.acceptance_length, settings.acceptance_length_floor, "{:.2f}"),
            ("acceptance rate", result.acceptance_rate, settings.acceptance_rate_floor, "{:.1%}")):
        if floor is None:
            continue
        if value is None:
            failures.append(f"{label} not reported by /metrics (speculative decoding off, or metrics disabled)")
        elif value < floor:
            failures.append(f"{label} {shown.format(value)} < {shown.format(floor)}")
    return failures


def read_key(env_file: str | None, variable: str) -> str | None:
    """The API key from the service's EnvironmentFile (KEY=VALUE lines), if it has one."""
    if not env_file:
        return None
    try:
        with open(env_file) as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                if key == variable:
                    return value.strip().strip('"')
    except FileNotFoundError:
        return None
    return None


def recheck(settings: GateSettings) -> dict[str, str]:
    """What a refresh reads again of a service whose gate passed, cheaply and without asking the model anything:
    whether /health answers, and the model /v1/models serves."""
    try:
        with _request(settings, "/health", timeout=10) as response:
            health = "answers" if response.status == 200 else f"answered {response.status}"
    except urllib.error.HTTPError as error:
        health = f"answered {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return {"health": f"unreachable ({getattr(error, 'reason', error)})", "model": "no answer"}
    try:
        with _request(settings, "/v1/models", timeout=10) as response:
            listed = [str(m.get("id")) for m in json.load(response).get("data", [])]
        model = settings.model if settings.model in listed else (", ".join(listed) or "none")
    except urllib.error.HTTPError as error:
        model = f"/v1/models answered {error.code}"
    except (urllib.error.URLError, OSError, ValueError) as error:
        model = f"/v1/models unreadable ({getattr(error, 'reason', error)})"
    return {"health": health, "model": model}


def main_recheck(settings_json: str, env_file: str | None, key_variable: str) -> int:
    settings = GateSettings(**json.loads(settings_json), api_key=read_key(env_file, key_variable))
    for name, value in recheck(settings).items():
        print(f"{name}: {value}")
    return 0


def main(settings_json: str, env_file: str | None, key_variable: str) -> int:
    settings = GateSettings(**json.loads(settings_json), api_key=read_key(env_file, key_variable))
    result = run_gate(settings)
    print("GPUHOSTS_GATE " + json.dumps(result.outputs(), sort_keys=True))
    for failure in result.failures:
        print(f"deploy gate: failed: {failure}")
    print("deploy gate: " + ("passed" if result.passed else "FAILED"))
    return 0 if result.passed else 1
