"""The engines the simulated kpro5 really runs (host setting `serve_engines`): gpuhosts renders and installs the
service units in container 129, `systemctl start` inside the container runs their ExecStart, and what the
engine answers follows the flags on that command line (tests/fakehost/engines.py, tests/engine_standin.py).

Each case edits the installed unit's ExecStart (one flag per continued line, as gpuhosts renders it) to add or
drop flags, starts it through `pct exec 129 -- systemctl start`, and asks the engine over HTTP. Every engine a
test started is ended by the `host` fixture (fakehost.engines.stop_all)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, READY_CAP_S, kpro5_values
from fakehost import engines, host_env
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from fakehost.util import configure
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.protocol import parse_result
from gpuhosts.stacks import validate_stack
from sshhost import free_port

SGLANG = "gpuhosts-qwen-sglang.service"
VLLM = "gpuhosts-qwen-vllm-dflash.service"
VERSION = "580.126.09"
API_KEY = "sk-engines-test-key-4c1d9a"
SECRETS = {"hfToken": "hf_EnginesTestToken0b7e21", "llmApiKey": API_KEY}
CT = "var/lib/lxc/129/rootfs"
READY_S = float(READY_CAP_S)
LONG = " ".join(["word"] * 60)


@dataclass
class Host:
    tree: Path

    def ct(self, path: str) -> Path:
        return self.tree / CT / path.lstrip("/")


def kpro5_units(run_file: Path, sha256: str) -> list:
    """kpro5's units in apply order, its services on 127.0.0.1 (each test gives its engine a port of its own)."""
    values = kpro5_values()
    values.pop("benchmarks", None)  # the engines' tests need the services only
    values["nvidia"].update(url=f"file://{run_file}", sha256=sha256)
    for service in values["services"]:
        service.update(bind="127.0.0.1")
    return plan_host(validate_stack(values, KPRO5_SECRETS)).apply_order


def apply(tree: Path, unit) -> None:
    stdin = SECRETS[unit.stdin_secret] + "\n" if unit.stdin_secret else ""
    result = subprocess.run(["bash", "-c", unit.ensure], input=stdin, capture_output=True, text=True,
                            env=host_env(tree), timeout=180)
    assert result.returncode == 0, f"{unit.key} failed:\n{result.stdout}\n{result.stderr}"
    parse_result(result.stdout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """kpro5 converged with both services' units installed in container 129 (the engines not run: the setting
    serve_engines is off while the units apply, so no gate runs either)."""
    root = tmp_path_factory.mktemp("engines")
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    tree = seed_kpro5(root / "kpro5")
    for unit in kpro5_units(run_file, make_fake_run(run_file, VERSION)):
        if unit.kind not in ("DeployGate", "Benchmark") and "-gate-" not in unit.key:
            apply(tree, unit)
    pct(tree, "systemctl", "stop", SGLANG)
    return tree


@pytest.fixture
def host(installed, tmp_path):
    tree = tmp_path / "kpro5"
    shutil.copytree(installed, tree, symlinks=True)
    configure(tree, serve_engines=True)
    try:
        yield Host(tree)
    finally:
        engines.stop_all(tree)


def pct(tree: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["pct", "exec", "129", "--", *argv], capture_output=True, text=True, env=host_env(tree),
                          timeout=60)


def unit_path(host: Host, name: str) -> Path:
    return host.ct(f"/etc/systemd/system/{name}")


def edit_unit(host: Host, name: str, drop=(), add=(), **service) -> int:
    """Rewrites the installed unit: ExecStart without the `drop` flags (each with its value) and with `add`, a
    port of its own, and [Service] settings replaced; answers the port."""
    path = unit_path(host, name)
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    last = first
    while lines[last].endswith("\\"):
        last += 1
    words = [line.rstrip("\\").strip() for line in lines[first:last + 1]]
    words[0] = words[0].removeprefix("ExecStart=")
    port = free_port()
    drop = (*drop, "--port")
    kept = [w for w in words if not any(w == f or w.startswith(f + " ") for f in drop)]
    exec_start = "ExecStart=" + " \\\n    ".join([*kept, f"--port {port}", *add])
    out = lines[:first] + [exec_start] + lines[last + 1:]
    for key, value in service.items():
        out = [f"{key}={value}" if line.startswith(f"{key}=") else line for line in out]
    path.write_text("\n".join(out) + "\n")
    return port


def state(host: Host, name: str) -> str:
    return pct(host.tree, "systemctl", "is-active", name).stdout.strip()


def supervisor(host: Host, name: str) -> int:
    return engines.recorded(host.ct("/"), name)[0]


def get(port: int, path: str, key: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def chat(port: int, body: dict, key: str | None = API_KEY) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_until(check, what: str, deadline_s: float = READY_S):
    """Polls `check` until it answers something true, within a bound: engines start asynchronously."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {deadline_s}s: {what}")


def start(host: Host, name: str, port: int, healthy: bool = True) -> None:
    result = pct(host.tree, "systemctl", "start", name)
    assert result.returncode == 0, result.stderr
    if healthy:
        wait_until(lambda: get(port, "/health")[0] == 200, f"{name} healthy on {port}")


def log(host: Host, name: str) -> str:
    path = host.ct(f"/var/log/fakehost/{name}.log")
    return path.read_text() if path.exists() else ""


def tools_body(model="qwen3.6-27b", **extra) -> dict:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    return {"model": model, "messages": [{"role": "user", "content": "Weather in Bergen?"}], "stream": True,
            "stream_options": {"include_usage": True}, "tools": [tool], "tool_choice": "auto", **extra}


def chat_body(model="qwen3.6-27b", content="Say one word.", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8, **extra}


def deltas(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


# --- lifecycle ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [SGLANG, VLLM])
@pytest.mark.parametrize("how", ["systemctl stop", "pct stop"])
def test_start_runs_the_engine_and_stopping_ends_its_processes(host, name, how):
    port = edit_unit(host, name)
    start(host, name, port)
    assert state(host, name) == "active"
    pgid = supervisor(host, name)
    assert engines.group_members(pgid)
    if how == "systemctl stop":
        assert pct(host.tree, "systemctl", "stop", name).returncode == 0
        assert state(host, name) == "inactive"
    else:
        subprocess.run(["pct", "stop", "129"], check=True, env=host_env(host.tree))
        assert not host.ct("/run/fakehost/engines").exists()
    assert engines.group_members(pgid) == []
    assert get(port, "/health")[0] == 0
    # the GPUs it held are free again
    assert not [h for h in json.loads((host.tree / "run/fakehost/kernel.json").read_text())["holders"]
                if h["pid"] != 0 and h["compute"]]


def test_enable_now_and_restart_run_the_engine_once(host):
    port = edit_unit(host, SGLANG)
    assert pct(host.tree, "systemctl", "enable", "--now", SGLANG).returncode == 0
    wait_until(lambda: get(port, "/health")[0] == 200, "healthy after enable --now")
    first = supervisor(host, SGLANG)
    assert pct(host.tree, "systemctl", "start", SGLANG).returncode == 0
    assert supervisor(host, SGLANG) == first
    assert pct(host.tree, "systemctl", "restart", SGLANG).returncode == 0
    wait_until(lambda: get(port, "/health")[0] == 200, "healthy after restart")
    assert supervisor(host, SGLANG) != first and engines.group_members(first) == []


FAILURES = [
    # (restart policy of the unit, state while the engine is down): systemd 252 service.c state_translation_table
    pytest.param("on-failure", "activating", id="restart-on-failure"),
    pytest.param("no", "failed", id="restart-no"),
]


@pytest.mark.parametrize("restart, down", FAILURES)
def test_an_engine_that_exits_at_start_leaves_the_unit_down(host, restart, down):
    configure(host.tree, engine_behaviour={"qwen-sglang": {"fail": "start"}})
    port = edit_unit(host, SGLANG, Restart=restart, RestartSec="600")
    start(host, SGLANG, port, healthy=False)
    wait_until(lambda: state(host, SGLANG) == down, f"{SGLANG} {down}")
    shown = pct(host.tree, "systemctl", "show", "-p", "ActiveState,SubState,Result", SGLANG).stdout.split()
    sub = "auto-restart" if down == "activating" else "failed"
    assert shown == ["Result=exit-code", f"ActiveState={down}", f"SubState={sub}"]
    assert "set to fail at start" in log(host, SGLANG)


def test_a_failing_health_is_served_as_503(host):
    configure(host.tree, engine_behaviour={SGLANG: {"fail": "health"}})
    port = edit_unit(host, SGLANG)
    start(host, SGLANG, port, healthy=False)
    assert wait_until(lambda: get(port, "/health")[0] == 503, "503 on /health")
    assert state(host, SGLANG) == "active"


def test_under_a_virtual_clock_start_returns_once_the_engine_answers_and_a_named_program_never_waits(host):
    configure(host.tree, engine_behaviour={SGLANG: {"fail": "health"}}, virtual_clock=["clocked.py"])
    port = edit_unit(host, SGLANG)
    start(host, SGLANG, port, healthy=False)
    # No poll: the start itself waited for the engine to listen.
    assert get(port, "/health")[0] == 503
    # A program the knob names, run by an engine's Python, sleeps an hour of its own clock at once; the clocks it
    # reads move on by that hour. Another program sleeps on the machine's clock.
    python = engine_python(host, SGLANG)
    for name in ("clocked.py", "other.py"):
        host.ct(f"/root/{name}").write_text(
            "import time\nstart = (time.monotonic(), time.time(), time.perf_counter())\ntime.sleep(3600 if __file__"
            ".endswith('clocked.py') else 0.1)\nprint(*[round(after - before) for before, after in zip(start, ("
            "time.monotonic(), time.time(), time.perf_counter()))])\n")
    clocked, other = (pct(host.tree, python, f"/root/{name}") for name in ("clocked.py", "other.py"))
    assert (clocked.returncode, clocked.stdout) == (0, "3600 3600 3600\n"), clocked.stderr
    assert (other.returncode, other.stdout) == (0, "0 0 0\n"), other.stderr


def engine_python(host: Host, name: str) -> str:
    """The Python of the engine's environment, as its ExecStart names it."""
    exec_start = unit_path(host, name).read_text().split("ExecStart=", 1)[1].split()[0]
    return str(Path(exec_start).parent / "python")


@pytest.mark.parametrize("first, second, message", [
    pytest.param(SGLANG, VLLM, "Free memory on device cuda:0", id="vllm-after-sglang"),
    pytest.param(VLLM, SGLANG, "Not enough memory. Please try to increase --mem-fraction-static.",
                 id="sglang-after-vllm"),
])
def test_a_second_engine_on_the_same_gpus_fails_at_start(host, first, second, message):
    port = edit_unit(host, first)
    start(host, first, port)
    other = edit_unit(host, second, Restart="no")
    start(host, second, other, healthy=False)
    wait_until(lambda: state(host, second) == "failed", f"{second} failed")
    assert message in log(host, second)
    assert state(host, first) == "active"
    # once the first is stopped the GPUs are free: the second starts
    pct(host.tree, "systemctl", "stop", first)
    result = pct(host.tree, "systemctl", "start", second)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: get(other, "/health")[0] == 200, f"{second} healthy once {first} stopped\n{log(host, second)}")


# --- flags ----------------------------------------------------------------------------------------------------

def metrics_value(text: str, name: str) -> float | None:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    return values[0] if values else None


CASES = [
    # (id, unit, flags dropped, flags added, behaviour, request, check)
    ("sglang-metrics-404-without-enable-metrics", SGLANG, ["--enable-metrics"], [], {},
     ("GET", "/metrics"), lambda s, t: s == 404),
    ("sglang-acceptance-capped-at-steps-plus-one", SGLANG, [], [], {"acceptance_length": 9.0},
     ("GET", "/metrics"), lambda s, t: s == 200 and metrics_value(t, "sglang:spec_accept_length") == 4.0),
    ("sglang-no-algorithm-reads-zero", SGLANG, ["--speculative-algorithm", "--speculative-num-steps",
                                                "--speculative-eagle-topk", "--speculative-num-draft-tokens"], [], {},
     ("GET", "/metrics"), lambda s, t: metrics_value(t, "sglang:spec_accept_length") == 0.0),
    ("vllm-tools-400-without-tool-flags", VLLM, ["--enable-auto-tool-choice", "--tool-call-parser"], [], {},
     ("POST", tools_body()), lambda s, t: s == 400 and json.loads(t)["error"]["message"] == '"auto" tool choice '
     "requires --enable-auto-tool-choice and --tool-call-parser to be set"),
    ("vllm-tools-stream-a-tool-call", VLLM, [], [], {},
     ("POST", tools_body()), lambda s, t: s == 200 and any(
         (c["choices"] or [{}])[0].get("delta", {}).get("tool_calls") for c in deltas(t))),
    ("sglang-tool-call-parser-gives-tool-calls", SGLANG, [], [], {},
     ("POST", tools_body()), lambda s, t: any((c["choices"] or [{}])[0].get("delta", {}).get("tool_calls")
                                              for c in deltas(t))),
    ("sglang-without-parser-the-call-is-content", SGLANG, ["--tool-call-parser"], [], {},
     ("POST", tools_body()), lambda s, t: "<tool_call>" in "".join(
         (c["choices"] or [{}])[0].get("delta", {}).get("content") or "" for c in deltas(t))),
    ("vllm-prompt-over-max-model-len", VLLM, ["--max-model-len"], ["--max-model-len 50"], {},
     ("POST", chat_body(content=LONG)), lambda s, t: s == 400 and "This model's maximum context length is 50 "
     "tokens. However, you requested 8 output tokens and your prompt contains 60 input tokens" in t),
    ("sglang-prompt-over-context-length", SGLANG, ["--context-length"], ["--context-length 50"], {},
     ("POST", chat_body(content=LONG)), lambda s, t: s == 400 and "The input (60 tokens) is longer than the "
     "model's context length (50 tokens)." in t),
    ("sglang-prompt-plus-output-over-context-length", SGLANG, ["--context-length"], ["--context-length 64"], {},
     ("POST", chat_body(content=LONG)), lambda s, t: s == 400 and "You requested a total of 68 tokens" in t),
    ("prompt-tokens-are-words", VLLM, [], [], {},
     ("POST", chat_body(content=LONG)), lambda s, t: json.loads(t)["usage"]["prompt_tokens"] == 60),
    ("vllm-other-model-404", VLLM, [], [], {},
     ("POST", chat_body(model="gpt-4")), lambda s, t: s == 404 and "The model `gpt-4` does not exist." in t),
    ("sglang-other-model-served", SGLANG, [], [], {},
     ("POST", chat_body(model="gpt-4")), lambda s, t: s == 200 and json.loads(t)["model"] == "gpt-4"),
    ("vllm-served-model-name", VLLM, ["--served-model-name"], ["--served-model-name other"], {},
     ("POST", chat_body(model="other")), lambda s, t: s == 200),
    ("vllm-reasoning-in-its-field", VLLM, [], [], {},
     ("POST", chat_body(stream=True)), lambda s, t: any("reasoning" in (c["choices"] or [{}])[0].get("delta", {})
                                                       for c in deltas(t))),
    ("vllm-without-reasoning-parser-thinking-is-content", VLLM, ["--reasoning-parser"], [], {},
     ("POST", chat_body(stream=True)), lambda s, t: "</think>" in "".join(
         (c["choices"] or [{}])[0].get("delta", {}).get("content") or "" for c in deltas(t))),
    ("sglang-without-reasoning-parser-thinking-is-content", SGLANG, ["--reasoning-parser"], [], {},
     ("POST", chat_body(stream=True)), lambda s, t: all(
         (c["choices"] or [{}])[0].get("delta", {}).get("reasoning_content") is None for c in deltas(t))),
    ("vllm-disable-log-stats-no-engine-series", VLLM, [], ["--disable-log-stats"], {},
     ("GET", "/metrics"), lambda s, t: s == 200 and "vllm:" not in t),
    ("vllm-no-speculative-config-no-counters", VLLM, ["--speculative-config"], [], {},
     ("GET", "/metrics"), lambda s, t: "vllm:generation_tokens_total" in t and "spec_decode" not in t),
    ("tokens-per-reply", SGLANG, [], [], {"tokens": 5},
     ("POST", chat_body(stream=True, max_tokens=100)), lambda s, t: deltas(t)[-1]["usage"]["completion_tokens"] == 5),
    ("unauthorised-without-key", VLLM, [], [], {},
     ("POST-nokey", chat_body()), lambda s, t: s == 401 and json.loads(t) == {"error": "Unauthorized"}),
    ("sglang-unauthorised-without-key", SGLANG, [], [], {},
     ("POST-nokey", chat_body()), lambda s, t: s == 401),
]


@pytest.mark.parametrize("name, drop, add, behaviour, request_, check",
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_each_flag_changes_what_the_engine_answers(host, name, drop, add, behaviour, request_, check):
    if behaviour:
        configure(host.tree, engine_behaviour={name: behaviour})
    port = edit_unit(host, name, drop=drop, add=add)
    start(host, name, port)
    method, what = request_
    if method == "GET":
        chat(port, chat_body())  # some traffic first: the gauges and counters have a value
        status, text = get(port, what)
    else:
        status, text = chat(port, what, key=None if method == "POST-nokey" else API_KEY)
    assert check(status, text), (status, text[:2000])


@pytest.mark.parametrize("name", [SGLANG, VLLM])
def test_health_and_metrics_need_no_key(host, name):
    port = edit_unit(host, name)
    start(host, name, port)
    assert get(port, "/health")[0] == 200 and get(port, "/metrics")[0] == 200
    assert get(port, "/v1/models")[0] == 401
    status, models = get(port, "/v1/models", key=API_KEY)
    assert status == 200 and [m["id"] for m in json.loads(models)["data"]] == ["qwen3.6-27b"]


def test_vllm_spec_decode_counters_grow_with_each_request(host):
    port = edit_unit(host, VLLM)
    start(host, VLLM, port)
    names = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
             "vllm:spec_decode_num_accepted_tokens_total")
    before = [metrics_value(get(port, "/metrics")[1], n) for n in names]
    assert chat(port, chat_body(stream=True))[0] == 200
    after = [metrics_value(get(port, "/metrics")[1], n) for n in names]
    assert all(b < a for b, a in zip(before, after)), (before, after)


@pytest.mark.parametrize("name", [SGLANG, VLLM])
def test_the_api_key_works_and_is_on_no_command_line(host, name):
    port = edit_unit(host, name)
    start(host, name, port)
    assert chat(port, chat_body())[0] == 200
    assert chat(port, chat_body(), key="wrong")[0] == 401
    members = engines.group_members(supervisor(host, name))
    assert len(members) >= 2  # the supervisor and the engine
    for pid in members:
        assert API_KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
    assert API_KEY not in log(host, name)
    # the engine really is gpuhosts' launcher for SGLang
    if name == SGLANG:
        assert any(b"sglang-serve.py" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in members)


def test_without_serve_engines_the_unit_is_only_marked_active(host):
    configure(host.tree, serve_engines=None)
    port = edit_unit(host, SGLANG)
    assert pct(host.tree, "systemctl", "start", SGLANG).returncode == 0
    assert state(host, SGLANG) == "active"
    assert not engines.tracked(host.ct("/"), SGLANG) and get(port, "/health")[0] == 0
    assert os.environ.get("FAKEHOST_CONTAINER") is None
