"""The bake-off's client: measures one running service on the benchmark's fixed prompts, and builds the table.

The prompts come from the benchmark's prompts file (gpuhosts/plans/benchmark.py `bench_prompts`), the same file
DDTree's benchmark.py answers (`--prompts`): each prompt's messages and tools, and the chat mode, which every
request sends as `chat_template_kwargs.enable_thinking` (vLLM and SGLang both pass a request's
chat_template_kwargs to the chat template: their entrypoints/openai/protocol.py `ChatCompletionRequest`), so no
row rests on an engine's default. For each prompt it streams one request and takes the time to the first token (TTFT) and the decode rate between
the first and the last token (the usage count of completion tokens, since a speculative step can carry several);
around each request it reads the engine's Prometheus metrics, so acceptance length and rate come from the
engine itself, as the deploy gate reads them (gpuhosts/hostside/gate_probe.py `acceptance`): vLLM's counters are
differenced over the prompts, SGLang's gauges read after each one. The long-context request is sized by two short
calibration requests (the engine's own `usage.prompt_tokens` says how many tokens a filler word costs), so it
reaches `contextTokens` whatever the tokenizer.

Like the gate, this module runs in two places: imported by gpuhosts (tests, the table of the stack output) and,
verbatim, inside the container with the service's own Python (templates/benchmark/bench.py.j2). There it loads
the gate's functions from the gate script every service installs, so it needs only the standard library and
`prometheus_client`.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from typing import Any

# The one tool of the tool-call prompt; its JSON schema is the OpenAI `tools` entry both engines parse. The plan
# writes it into the prompts file, whence every row takes it.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather at a place.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
LONG_CONTEXT = "longContext"
# Filler for the long-context prompt: plain words, numbered so that no two notes read alike.
NOTE = "Note {n}: the ferry to harbour {h} left on time with {c} crates of apples and the weather was calm."
HARBOURS = ("Oslo", "Tromso", "Stavanger", "Aalesund", "Kristiansand", "Bodo")
NEEDLE = "Note about the harbour in Bergen: the code word is heliotrope."
CALIBRATION_NOTES = (20, 200)
COLUMNS = {
    "decodeTokensPerS": "decode tok/s",
    "ttftS": "TTFT s",
    "acceptanceLength": "acceptance length",
    "acceptanceRate": "acceptance rate",
    "longContextDecodeRatio": "long/short decode",
}


def load_gate(path: str):
    """The deploy gate's module from the script the service units install (its functions, not a copy of them)."""
    return load_module("gpuhosts_gate_probe", path)


def load_module(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is made.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --- prompts ---------------------------------------------------------------------------------------------------

def filler(notes: int) -> str:
    lines = [NOTE.format(n=n, h=HARBOURS[n % len(HARBOURS)], c=10 + n % 90) for n in range(notes)]
    lines.insert(notes // 2, NEEDLE)
    return "\n".join(lines)


def notes_for(context_tokens: int, small: tuple[int, int], large: tuple[int, int]) -> int:
    """How many filler notes reach `context_tokens`, from two calibration points (notes, prompt tokens)."""
    (n1, t1), (n2, t2) = small, large
    per_note = (t2 - t1) / (n2 - n1)
    if per_note <= 0:
        raise ValueError(f"calibration gave {t1} and {t2} prompt tokens for {n1} and {n2} notes")
    return max(n2, math.ceil((context_tokens - t1) / per_note) + n1 + 1)


def load_prompts(path: str) -> dict:
    """The benchmark's prompts file; a container path, under GPUHOSTS_HOST_ROOT on a simulated host
    (docs/fakehost-contract.md)."""
    with open(os.environ.get("GPUHOSTS_HOST_ROOT", "") + path) as handle:
        document = json.load(handle)
    for key in ("thinking", "maxTokens", "prompts", LONG_CONTEXT):
        if key not in document:
            raise ValueError(f"{path} has no {key!r}: not a benchmark prompts file")
    return document


def request_body(gate, settings: dict, messages: list[dict], *, tools: list | None = None,
                 max_tokens: int | None = None, stream: bool = True) -> dict:
    prompts = settings["_prompts"]
    body = {"model": settings["model"], "messages": messages,
            "max_tokens": max_tokens or prompts["maxTokens"], "temperature": 0, "stream": stream,
            # The chat mode of every row, sent rather than left to the template's default.
            "chat_template_kwargs": {"enable_thinking": prompts["thinking"]}}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    return body


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# --- one request -----------------------------------------------------------------------------------------------

def streamed(gate, settings, body: dict, clock=time.perf_counter) -> dict[str, Any]:
    """TTFT and decode rate of one streamed request; `completion`/`prompt` tokens from its usage."""
    gate_settings = settings["_gate"]
    started = clock()
    first = last = None
    chunks, usage, tool_call = 0, {}, False
    with gate._request(gate_settings, "/v1/chat/completions", body) as response:
        for event in gate.stream_events(response):
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                calls = bool(delta.get("tool_calls"))
                tool_call = tool_call or calls
                if calls or gate.has_text(delta, settings["reasoning_field"]):
                    now = clock()
                    first = now if first is None else first
                    last = now
                    chunks += 1
    tokens = usage.get("completion_tokens", chunks)
    decode = (tokens - 1) / (last - first) if first is not None and last > first and tokens >= 2 else None
    return {"ttftS": None if first is None else first - started, "decodeTokensPerS": decode,
            "completionTokens": tokens, "promptTokens": usage.get("prompt_tokens"), "toolCall": tool_call}


def prompt_tokens(gate, settings, prompt: str) -> int:
    body = request_body(gate, settings, user(prompt), max_tokens=1, stream=False)
    with gate._request(settings["_gate"], "/v1/chat/completions", body) as response:
        usage = json.load(response).get("usage") or {}
    if not usage.get("prompt_tokens"):
        raise ValueError("the engine reported no usage.prompt_tokens for a calibration request")
    return int(usage["prompt_tokens"])


def metrics_text(gate, settings) -> str | None:
    """The engine's /metrics, or None when it serves none (SGLang without --enable-metrics answers 404)."""
    try:
        with gate._request(settings["_gate"], "/metrics") as response:
            return response.read().decode()
    except gate.urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


# --- one service -----------------------------------------------------------------------------------------------

def measure_service(gate, settings: dict, clock=time.monotonic, sleep=time.sleep) -> dict[str, Any]:
    """Every prompt against the running service; failures are named, never raised."""
    result: dict[str, Any] = {"service": settings["service"], "engine": settings["engine"],
                              "method": settings["method"], "prompts": {}, "failures": []}
    why = gate.wait_healthy(settings["_gate"], clock=clock, sleep=sleep)
    if why is not None:
        result["failures"].append(f"engine {why}")
        return summarise_service(settings, result)
    prompts = settings["_prompts"]
    first_metrics = metrics_text(gate, settings)
    if first_metrics is None and settings["speculative"]:
        result["failures"].append("/metrics answered 404: the engine runs without metrics (SGLang needs "
                                  "--enable-metrics), so acceptance cannot be read")
    result["answered"] = answered(prompts)
    readings: list[dict] = []
    spec = prompts[LONG_CONTEXT]
    for entry in [*prompts["prompts"], {"name": LONG_CONTEXT}]:
        kind = entry["name"]
        try:
            if kind == LONG_CONTEXT:
                points = [(n, prompt_tokens(gate, settings, filler(n) + "\n" + spec["question"])) for n in CALIBRATION_NOTES]
                messages, tools = user(filler(notes_for(spec["contextTokens"], *points)) + "\n" + spec["question"]), None
            else:
                messages, tools = entry["messages"], entry.get("tools")
            before = metrics_text(gate, settings)
            measured = streamed(gate, settings, request_body(gate, settings, messages, tools=tools))
            after = metrics_text(gate, settings)
        except gate.urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            result["failures"].append(f"{kind}: the engine answered {error.code}: {detail}")
            continue
        except (gate.urllib.error.URLError, OSError, ValueError) as error:
            result["failures"].append(f"{kind}: {getattr(error, 'reason', error)}")
            continue
        if settings["speculative"] and after is not None:
            accepted = gate.acceptance(settings["acceptance_metrics"], after, before)
            measured["acceptanceLength"], measured["acceptanceRate"] = accepted.length, accepted.rate
            if kind != LONG_CONTEXT:
                readings.append({"before": before, "after": after})
        if kind == LONG_CONTEXT and (measured["promptTokens"] or 0) < spec["contextTokens"]:
            result["failures"].append(f"longContext: reached {measured['promptTokens']} prompt tokens, fewer than "
                                      f"{spec['contextTokens']}")
        if tools and not measured["toolCall"]:
            result["failures"].append(f"{kind}: the reply holds no tool call (is the service's toolCallParser right?)")
        result["prompts"][kind] = measured
    if readings and settings["acceptance_metrics"]["kind"] == "counters":
        # Over the shared prompts at once: counters of the first reading before to the last one after. The long
        # prompt runs last, so it is outside that span: acceptance is over the prompts every row answers.
        overall = gate.acceptance(settings["acceptance_metrics"], readings[-1]["after"], readings[0]["before"])
        result["acceptance"] = {"length": overall.length, "rate": overall.rate}
    return summarise_service(settings, result)


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def summarise_service(settings: dict, result: dict) -> dict:
    """The service's figures: decode, TTFT and acceptance of the shared prompts (those of the prompts file, which
    every row answers), long-context decode against short."""
    prompts = result["prompts"]
    shared = [p for name, p in prompts.items() if name != LONG_CONTEXT]
    short = _mean([p["decodeTokensPerS"] for p in shared])
    long = prompts.get(LONG_CONTEXT, {}).get("decodeTokensPerS")
    overall = result.get("acceptance") or {
        "length": _mean([p.get("acceptanceLength") for p in shared]),
        "rate": _mean([p.get("acceptanceRate") for p in shared])}
    figures = {
        "decodeTokensPerS": short,
        "ttftS": prompts.get("shortChat", {}).get("ttftS"),
        "acceptanceLength": overall["length"] if settings["speculative"] else None,
        "acceptanceRate": overall["rate"] if settings["speculative"] else None,
        "longContextDecodeRatio": long / short if long is not None and short else None,
    }
    if settings["speculative"] and figures["acceptanceLength"] is None and not result["failures"]:
        result["failures"].append("acceptance not reported by /metrics (speculative decoding off, or metrics disabled)")
    result["figures"] = figures
    result["passed"] = not result["failures"]
    return result


# --- the table -------------------------------------------------------------------------------------------------

def build_table(measure: list[str], services: list[dict], ddtree: dict | None) -> dict[str, Any]:
    """Rows of the bake-off, one per service and per DDTree method, with the benchmark's figures as columns; a
    figure a row cannot have is None (a reference run reports acceptance length only)."""
    rows = []
    for service in services:
        row = {"run": service["service"], "method": f"{service['engine']} {service['method']}"}
        row.update({name: service.get("figures", {}).get(name) for name in measure})
        row["status"] = "ok" if service.get("passed") else "failed: " + "; ".join(service.get("failures", []))
        rows.append(row)
    if ddtree is not None:
        if ddtree.get("failures"):
            rows.append({"run": "ddtree reference", "method": "DDTree", **{name: None for name in measure},
                         "status": "failed: " + "; ".join(ddtree["failures"])})
        else:
            best = ddtree["ddtree"]
            for figures, label in ((best, f"DDTree (budget {best['bestBudget']})"), (ddtree["dflash"], "DFlash")):
                row = {"run": "ddtree reference", "method": label, **{name: None for name in measure}}
                if "acceptanceLength" in measure:
                    row["acceptanceLength"] = figures["acceptanceLength"]
                row["status"] = "ok"
                rows.append(row)
    return {"columns": ["run", "method", *measure, "status"], "rows": rows, "notes": table_notes(services, ddtree)}


# One definition of acceptance length in every row: tokens emitted per target verify step, the bonus token included.
# vLLM: 1 + accepted / drafts over its counters (vllm/v1/spec_decode/metrics.py `SpecDecodingLogging.log`,
# "mean acceptance length includes the bonus token"); SGLang: accepted tokens + one per request over verify steps
# (sglang/srt/managers/scheduler_metrics_mixin.py `update_spec_metrics` and `log_decode_stats`, the gauge
# sglang:spec_accept_length over the last decode-log window); DDTree and its DFlash: each round's accepted nodes with
# the root, and accepted draft tokens + 1 (liranringel/ddtree c96427a ddtree.py `follow_verified_tree`, dflash.py
# `dflash_generate`), averaged as its make_latex_table.py does.
ACCEPTANCE_NOTE = ("acceptance length: tokens per target verify step, the bonus token included, in every row "
                   "(vLLM 1 + accepted/drafts from its counters; SGLang's spec_accept_length gauge; DDTree's "
                   "acceptance_lengths as benchmark.py saves them)")


def answered(prompts: dict) -> dict:
    """What a row answered: the prompts of the benchmark's prompts file by name, in its chat mode."""
    return {"prompts": [p["name"] for p in prompts["prompts"]], "thinking": bool(prompts["thinking"])}


def describe(what: dict) -> str:
    if what.get("dataset"):
        samples = f" ({what['samples']} samples)" if what.get("samples") else ""
        source = f"its data set {what['dataset']}{samples}"
    else:
        source = "the benchmark's prompts (" + ", ".join(what.get("prompts") or []) + ")"
    return f"{source}, thinking {'on' if what.get('thinking') else 'off'}"


def table_notes(services: list[dict], ddtree: dict | None) -> list[str]:
    """How acceptance is counted, and what the rows answered, as each row's own result says it: the services'
    client records the prompts file it sent and its chat mode, DDTree's run the prompts or data set and the mode
    its benchmark.py applied (gpuhosts/hostside/ddtree_result.py `answered`). When every row answered the same,
    one note says so; otherwise each kind of row says what it answered."""
    notes = [ACCEPTANCE_NOTE]
    rows = [("services", s["answered"]) for s in services if s.get("answered")]
    if ddtree is not None and ddtree.get("answered"):
        rows.append(("ddtree reference", ddtree["answered"]))
    kinds = {describe(what) for _, what in rows}
    if len(kinds) == 1:
        notes.append(f"every row: {kinds.pop()}")
    else:
        for label in dict.fromkeys(label for label, _ in rows):
            said = sorted({describe(what) for name, what in rows if name == label})
            notes.append(f"{label}: {'; '.join(said)}: not what the other rows answered")
    if services:
        notes.append("services also: longContext, for long/short decode only; their decode, TTFT and acceptance "
                     "are over the prompts every row answers")
    return notes


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "—"
    if name == "acceptanceRate":
        return f"{value:.1%}"
    if name == "ttftS":
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:.2f}" if name != "decodeTokensPerS" else f"{value:.1f}"
    return str(value).replace("|", "\\|")


def markdown(title: str, table: dict) -> str:
    heads = [COLUMNS.get(c, c) for c in table["columns"]]
    lines = [f"# {title}", "", "| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for row in table["rows"]:
        lines.append("| " + " | ".join(_cell(c, row.get(c)) for c in table["columns"]) + " |")
    if table.get("notes"):
        lines += ["", *(f"- {note}" for note in table["notes"])]
    return "\n".join(lines) + "\n"


# --- entry points ----------------------------------------------------------------------------------------------

def _settings(gate, settings_json: str, env_file: str | None, key_variable: str) -> dict:
    settings = json.loads(settings_json)
    settings["_prompts"] = load_prompts(settings["prompts_file"])
    key = gate.read_key(env_file, key_variable) if env_file else None
    settings["_gate"] = gate.GateSettings(
        base_url=settings["base_url"], model=settings["model"], engine=settings["engine"],
        speculative=settings["speculative"], reasoning_field=settings["reasoning_field"],
        acceptance_metrics=settings["acceptance_metrics"], ready_timeout_s=settings["ready_timeout_s"],
        request_timeout_s=settings.get("request_timeout_s", 1800.0), api_key=key)
    return settings


def main(argv: list[str]) -> int:
    """`run GATE SETTINGS [ENV_FILE KEY_VAR]`: measure the running service, print GPUHOSTS_BENCH_SERVICE;
    `wait GATE SETTINGS [ENV_FILE KEY_VAR]`: wait for /health only;
    `table TITLE MEASURE_JSON SERVICE_FILE… [--ddtree FILE]`: print GPUHOSTS_BENCH_TABLE and GPUHOSTS_BENCH_MD."""
    command, rest = argv[0], argv[1:]
    if command in ("run", "wait"):
        gate = load_gate(rest[0])
        settings = _settings(gate, rest[1], rest[2] if len(rest) > 2 else None, rest[3] if len(rest) > 3 else "")
        if command == "wait":
            why = gate.wait_healthy(settings["_gate"])
            print(f"{settings['service']}: " + ("healthy" if why is None else why))
            return 0 if why is None else 1
        result = measure_service(gate, settings)
        print("GPUHOSTS_BENCH_SERVICE " + json.dumps(result, sort_keys=True))
        return 0 if result["passed"] else 1
    if command == "ddtree":
        result = run_ddtree(rest[0], json.loads(rest[1]))
        for failure in result.get("failures", []):
            print(f"ddtree reference: failed: {failure}")
        return 0 if not result.get("failures") else 1
    if command == "table":
        title, measure, files = rest[0], json.loads(rest[1]), rest[2:]
        ddtree = None
        if "--ddtree" in files:
            at = files.index("--ddtree")
            ddtree = _read_json(files[at + 1])
            files = files[:at] + files[at + 2:]
        table = build_table(measure, [_read_json(path) for path in files], ddtree)
        print("GPUHOSTS_BENCH_TABLE " + json.dumps(table, sort_keys=True))
        print("GPUHOSTS_BENCH_MD " + base64.b64encode(markdown(title, table).encode()).decode())
        return 0
    print(f"bench: unknown command {command!r}", file=sys.stderr)
    return 2


def run_ddtree(result_script: str, job: dict[str, Any]) -> dict[str, Any]:
    """Run DDTree's own benchmark.py (its output to the job's log), then read the run it saved with the result
    parser (gpuhosts/hostside/ddtree_result.py, shipped beside this script); the outcome goes to the job's `out`."""
    # Container paths; a simulated container lives under GPUHOSTS_HOST_ROOT (docs/fakehost-contract.md).
    root = os.environ.get("GPUHOSTS_HOST_ROOT", "")
    named_log = job["log"]  # as the container names it, for the row
    job = {**job, **{k: root + job[k] for k in ("cwd", "save", "log", "out")},
           "argv": [root + job["argv"][0], *job["argv"][1:]]}
    os.makedirs(os.path.dirname(job["log"]), exist_ok=True)
    if os.path.exists(job["save"]):
        os.remove(job["save"])  # never read an earlier run as this one's
    with open(job["log"], "w") as log:
        status = subprocess.run(job["argv"], cwd=job["cwd"], stdout=log, stderr=subprocess.STDOUT).returncode
    if status != 0:
        with open(job["log"], errors="replace") as log:
            lines = [line.rstrip() for line in log.readlines()]
        result = {"failures": [reference_failure(status, lines, named_log)]}
    else:
        reader = load_module("gpuhosts_ddtree_result", result_script)
        try:
            result = reader.summarise(reader.load_run(job["save"]))
        except Exception as error:  # a run the parser cannot read is this job's failure, named, not a crash
            result = {"failures": [f"{job['save']}: {error}"]}
    with open(job["out"], "w") as handle:
        json.dump(result, handle, sort_keys=True)
    return result


# torch's out-of-memory error as a traceback ends with it: the Python class torch.OutOfMemoryError (torch/__init__.py
# @ v2.11.0, which the CUDA caching allocator raises) and its message "CUDA out of memory. Tried to allocate …"
# (c10/cuda/CUDACachingAllocator.cpp `malloc`, the message it builds on a failed allocation).
OUT_OF_MEMORY = ("torch.OutOfMemoryError:", "torch.cuda.OutOfMemoryError:", "CUDA out of memory")


def reference_failure(status: int, lines: list[str], log: str) -> str:
    """Why benchmark.py failed, as its row says it: out of GPU memory (torch's own message, which names what it tried
    to allocate and what was free), or its exit status and the end of its log."""
    for line in reversed(lines):
        if any(mark in line for mark in OUT_OF_MEMORY):
            return f"out of GPU memory: {line.strip()[:400]} (benchmark.py exited with status {status}; see {log})"
    return f"benchmark.py exited with status {status}; the end of {log}: " + " / ".join(lines[-5:])


def _read_json(path: str) -> dict:
    with open(path) as handle:
        return json.load(handle)
