"""The bake-off's table: one row per service and per DDTree method, the benchmark's figures as columns, failures
named in the row; and how the long-context request is sized from the engine's own token counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuhosts.hostside.bench_probe import build_table, filler, markdown, notes_for, summarise_service

ALL = ["decodeTokensPerS", "ttftS", "acceptanceLength", "acceptanceRate", "longContextDecodeRatio"]


def service(name="qwen-sglang", engine="sglang", method="mtp", passed=True, failures=(), **figures):
    base = {name: None for name in ALL}
    base.update(figures)
    return {"service": name, "engine": engine, "method": method, "passed": passed, "failures": list(failures),
            "figures": base}


# What gpuhosts/hostside/ddtree_result.py `summarise` gives for a run (tests/fixtures/ddtree/*.expected.json).
DDTREE = {"ddtree": {"method": "ddtree_tb64", "bestBudget": 64, "acceptanceLength": 1.67, "speedup": 1.4},
          "dflash": {"acceptanceLength": 1.59, "speedup": 1.3},
          "methods": {"baseline": {"acceptanceLength": 1.0}, "dflash": {"acceptanceLength": 1.59},
                      "ddtree_tb64": {"acceptanceLength": 1.67}}}

TABLES = [
    ("two services, all figures",
     ALL, [service(decodeTokensPerS=73.5, ttftS=0.21, acceptanceLength=3.1, acceptanceRate=0.7,
                   longContextDecodeRatio=0.88),
           service("qwen-vllm-dflash", "vllm", "dflash", decodeTokensPerS=51.0, ttftS=0.3, acceptanceLength=1.59,
                   acceptanceRate=0.04, longContextDecodeRatio=0.8)], None,
     [["qwen-sglang", "sglang mtp", 73.5, 0.21, 3.1, 0.7, 0.88, "ok"],
      ["qwen-vllm-dflash", "vllm dflash", 51.0, 0.3, 1.59, 0.04, 0.8, "ok"]]),
    ("only the figures asked for",
     ["acceptanceLength"], [service(decodeTokensPerS=73.5, acceptanceLength=3.1)], None,
     [["qwen-sglang", "sglang mtp", 3.1, "ok"]]),
    ("a failed service keeps its row and says why",
     ALL, [service(passed=False, failures=["engine not healthy after 30 s: /health answered 503"])], None,
     [["qwen-sglang", "sglang mtp", None, None, None, None, None,
       "failed: engine not healthy after 30 s: /health answered 503"]]),
    ("the reference adds its best budget and DFlash, acceptance length only",
     ALL, [service(acceptanceLength=3.1)], DDTREE,
     [["qwen-sglang", "sglang mtp", None, None, 3.1, None, None, "ok"],
      ["ddtree reference", "DDTree (budget 64)", None, None, 1.67, None, None, "ok"],
      ["ddtree reference", "DFlash", None, None, 1.59, None, None, "ok"]]),
    ("a failed reference is one row naming the failure",
     ["acceptanceLength"], [service(acceptanceLength=3.1)], {"failures": ["benchmark.py exited with status 1"]},
     [["qwen-sglang", "sglang mtp", 3.1, "ok"],
      ["ddtree reference", "DDTree", None, "failed: benchmark.py exited with status 1"]]),
]


@pytest.mark.parametrize("case, measure, services, ddtree, rows", TABLES, ids=[t[0] for t in TABLES])
def test_the_table_has_a_row_per_run_and_a_column_per_figure(case, measure, services, ddtree, rows):
    table = build_table(measure, services, ddtree)
    assert table["columns"] == ["run", "method", *measure, "status"]
    assert [[row[c] for c in table["columns"]] for row in table["rows"]] == rows


def test_the_markdown_page_shows_units_and_dashes_for_what_a_run_cannot_have():
    table = build_table(ALL, [service(decodeTokensPerS=73.46, ttftS=0.214, acceptanceLength=3.1, acceptanceRate=0.7,
                                      longContextDecodeRatio=0.88)], DDTREE)
    page = markdown("Benchmark spec-bakeoff", table).splitlines()
    assert page[0] == "# Benchmark spec-bakeoff"
    assert page[2] == ("| run | method | decode tok/s | TTFT s | acceptance length | acceptance rate | long/short decode "
                       "| status |")
    assert page[4] == "| qwen-sglang | sglang mtp | 73.5 | 0.21 | 3.10 | 70.0% | 0.88 | ok |"
    assert page[5] == "| ddtree reference | DDTree (budget 64) | — | — | 1.67 | — | — | ok |"


def test_a_failure_text_cannot_break_the_markdown_table():
    table = build_table(["ttftS"], [service(passed=False, failures=["answered 400: a | b"])], None)
    row = [line for line in markdown("t", table).splitlines() if line.startswith("| ")][-1]
    assert row.endswith("| failed: answered 400: a \\| b |")


SETTINGS = {"speculative": True}


@pytest.mark.parametrize("prompts, expected", [
    ({"shortChat": {"decodeTokensPerS": 60.0, "ttftS": 0.2}, "code": {"decodeTokensPerS": 80.0},
      "toolCall": {"decodeTokensPerS": 70.0}, "longContext": {"decodeTokensPerS": 61.6}},
     {"decodeTokensPerS": 70.0, "ttftS": 0.2, "longContextDecodeRatio": 0.88}),
    ({"shortChat": {"decodeTokensPerS": 60.0, "ttftS": 0.2}}, {"decodeTokensPerS": 60.0, "longContextDecodeRatio": None}),
], ids=["all prompts", "long context failed"])
def test_decode_is_the_short_prompts_mean_and_long_context_is_its_ratio(prompts, expected):
    result = summarise_service(SETTINGS, {"prompts": prompts, "failures": [],
                                          "acceptance": {"length": 3.0, "rate": 0.5}})
    for name, value in expected.items():
        assert result["figures"][name] == pytest.approx(value) if value is not None else result["figures"][name] is None


def test_a_speculative_service_without_acceptance_figures_fails():
    result = summarise_service(SETTINGS, {"prompts": {"shortChat": {"decodeTokensPerS": 60.0}}, "failures": []})
    assert not result["passed"] and "acceptance not reported by /metrics" in result["failures"][0]


@pytest.mark.parametrize("per_note, overhead, target", [(18.0, 30, 120_000), (25.5, 12, 100_000), (9.0, 400, 131_000)])
def test_the_long_prompt_is_sized_from_two_calibration_points(per_note, overhead, target):
    tokens = lambda notes: int(overhead + per_note * notes)
    notes = notes_for(target, (20, tokens(20)), (200, tokens(200)))
    assert tokens(notes) >= target and tokens(notes - 2) < target


def test_the_filler_is_deterministic_and_holds_the_needle_once():
    assert filler(500) == filler(500)
    assert filler(500).count("Bergen") == 1 and len(filler(500).splitlines()) == 501


# A stand-in of liranringel/ddtree benchmark.py `main` at c96427a185677bf4133ed865dd1626a5041aef9b: the flags it
# parses (tests/fixtures/ddtree/benchmark-args.json, captured from it), no figure printed, and the run it
# torch.save-s at --save-path (here the fixture real torch 2.11 wrote, tests/fixtures/ddtree/README.md).
# torch 2.11's message for a failed CUDA allocation (c10/cuda/CUDACachingAllocator.cpp), as a traceback ends with it.
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total capacity of "
       "47.40 GiB of which 812.00 MiB is free. Including non-PyTorch memory, this process has 46.59 GiB memory in use.")
STAND_IN = """
import argparse, os, shutil, sys
OOM = %r
parser = argparse.ArgumentParser()
for flag in ("--model-name-or-path", "--draft-name-or-path", "--dataset", "--save-path"):
    parser.add_argument(flag, required=True)
for flag in ("--max-samples", "--max-new-tokens", "--tree-budget", "--temperature"):
    parser.add_argument(flag)
args = parser.parse_args()
if os.environ.get("STAND_IN_FAIL"):
    print("Traceback (most recent call last):", file=sys.stderr)
    print(OOM, file=sys.stderr)
    raise SystemExit(1)
shutil.copy(os.environ["STAND_IN_RUN"], os.environ.get("GPUHOSTS_HOST_ROOT", "") + args.save_path)
""" % OOM


@pytest.mark.parametrize("fail", [False, True], ids=["saved run", "failed run"])
def test_the_reference_job_runs_the_script_and_reads_its_saved_run(tmp_path, monkeypatch, fail):
    """bench.py's `ddtree` command with a stand-in of DDTree's benchmark.py (its flags, its saved run: the fixture
    torch wrote) and the shipped reader; the figures are the reader's, a failure names the end of the log."""
    from gpuhosts.hostside.bench_probe import run_ddtree
    from gpuhosts.plans.ddtree_reference import render_ddtree_result_script

    fixtures = Path(__file__).parent / "fixtures" / "ddtree"
    (tmp_path / "opt/ddtree/c0").mkdir(parents=True)
    (tmp_path / "opt/ddtree/c0/benchmark.py").write_text(STAND_IN)
    (tmp_path / "venv/bin").mkdir(parents=True)
    (tmp_path / "venv/bin/python").symlink_to(sys.executable)
    reader = tmp_path / "reader.py"
    reader.write_text(render_ddtree_result_script().content)
    monkeypatch.setenv("GPUHOSTS_HOST_ROOT", str(tmp_path))
    monkeypatch.setenv("STAND_IN_RUN", str(fixtures / "run-mt-bench-t0.pt"))
    if fail:
        monkeypatch.setenv("STAND_IN_FAIL", "1")
    save = "/var/lib/b/ddtree/run.pt"
    job = {"argv": ["/venv/bin/python", "benchmark.py", "--model-name-or-path", "/srv/models/t",
                    "--draft-name-or-path", "/srv/models/d", "--dataset", "mt-bench", "--save-path", save],
           "cwd": "/opt/ddtree/c0", "save": save, "log": "/var/lib/b/ddtree/benchmark.log",
           "out": "/var/lib/b/ddtree/result.json"}
    result = run_ddtree(str(reader), job)
    assert json.loads((tmp_path / "var/lib/b/ddtree/result.json").read_text()) == result
    if fail:
        assert result["failures"][0].startswith("out of GPU memory: " + OOM)
        assert "benchmark.py exited with status 1" in result["failures"][0]
        return
    expected = json.loads((fixtures / "run-mt-bench-t0.expected.json").read_text())
    assert result["dflash"]["acceptanceLength"] == expected["methods"]["dflash"]["acceptanceLength"]
    table = build_table(["acceptanceLength"], [], result)
    best = result["ddtree"]
    assert [r["acceptanceLength"] for r in table["rows"]] == [best["acceptanceLength"],
                                                               result["dflash"]["acceptanceLength"]]


@pytest.mark.parametrize("lines, expected", [
    (["loading", OOM], "out of GPU memory: " + OOM + " (benchmark.py exited with status 1; see LOG)"),
    (["x", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "done"],
     "out of GPU memory: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB "
     "(benchmark.py exited with status 1; see LOG)"),
    (["a", "b", "c", "d", "e", "ValueError: no dataset"],
     "benchmark.py exited with status 1; the end of LOG: b / c / d / e / ValueError: no dataset"),
], ids=["torch.OutOfMemoryError", "the older torch.cuda name", "any other failure"])
def test_the_reference_row_says_why_it_failed(lines, expected):
    from gpuhosts.hostside.bench_probe import reference_failure

    assert reference_failure(1, lines, "LOG") == expected


def plan_prompts(thinking: bool = True) -> dict:
    """The prompts file the plan writes for kpro5's bake-off (gpuhosts/plans/benchmark.py `prompts_file`)."""
    from conftest import KPRO5_SECRETS, kpro5_values
    from gpuhosts.plans.benchmark import prompts_file
    from gpuhosts.stacks import validate_stack

    (bench,) = validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS).benchmarks
    return json.loads(prompts_file(bench.model_copy(update={"thinking": thinking})).content)


def ddtree_answered(args: dict, names: list[str] | None = None) -> dict:
    """What gpuhosts/hostside/ddtree_result.py reads from a run's args: the patched benchmark.py saves --prompts,
    --thinking and the prompts' names; the upstream one (the fixtures' runs) none of them."""
    from gpuhosts.hostside.ddtree_result import answered as read

    return read({"prompts": names}, args)


PROMPTS = "/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json"
SHARED = "the benchmark's prompts (shortChat, code, toolCall)"
NOTES = [
    ("services only", True, None, [f"every row: {SHARED}, thinking on"]),
    ("the reference on the same prompts and mode", True,
     {"prompts": PROMPTS, "thinking": "on"}, [f"every row: {SHARED}, thinking on"]),
    ("both with thinking off", False, {"prompts": PROMPTS, "thinking": "off"}, [f"every row: {SHARED}, thinking off"]),
    ("the reference in another mode", True, {"prompts": PROMPTS, "thinking": "off"},
     [f"services: {SHARED}, thinking on: not what the other rows answered",
      f"ddtree reference: {SHARED}, thinking off: not what the other rows answered"]),
    ("an upstream run of a data set", True, {"dataset": "mt-bench", "max_samples": 16},
     [f"services: {SHARED}, thinking on: not what the other rows answered",
      "ddtree reference: its data set mt-bench (16 samples), thinking off: not what the other rows answered"]),
]


@pytest.mark.parametrize("case, thinking, args, says", NOTES, ids=[n[0] for n in NOTES])
def test_the_table_says_which_prompts_and_mode_every_row_answered(case, thinking, args, says):
    from gpuhosts.hostside.bench_probe import answered

    prompts = plan_prompts(thinking)
    services = [{**service(acceptanceLength=3.1), "answered": answered(prompts)}]
    ddtree = None if args is None else {
        **DDTREE, "answered": ddtree_answered(args, [p["name"] for p in prompts["prompts"]] if "prompts" in args
                                          else None)}
    table = build_table(["acceptanceLength"], services, ddtree)
    assert table["notes"][0].startswith("acceptance length: tokens per target verify step, the bonus token included")
    assert table["notes"][1:-1] == says
    assert table["notes"][-1].startswith("services also: longContext, for long/short decode only")
    page = markdown("t", table)
    assert all(f"- {note}" in page for note in table["notes"])


def patched_prompts_module(tmp_path: Path):
    """prompts.py of DDTree's tree with stacks/patches/ddtree-gdn-hybrid.patch applied (part (d))."""
    import importlib.util
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[1]
    tree = tmp_path / "ddtree"
    shutil.copytree(root / "tests/fixtures/ddtree/upstream-c96427a", tree)
    subprocess.run(["git", "init", "--quiet"], cwd=tree, check=True)
    subprocess.run(["git", "apply", str(root / "stacks/patches/ddtree-gdn-hybrid.patch")], cwd=tree, check=True)
    spec = importlib.util.spec_from_file_location("ddtree_prompts", tree / "prompts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecordingTokenizer:
    """Records what `apply_chat_template` is given (transformers' signature: the conversation, `tools`,
    `tokenize`, `add_generation_prompt`, and the template's own keyword arguments such as enable_thinking)."""

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, conversation, tools=None, tokenize=True, add_generation_prompt=False, **kwargs):
        self.calls.append({"messages": list(conversation), "tools": tools, **kwargs})
        return "text"


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking on", "thinking off"])
def test_the_services_and_ddtree_read_one_prompts_file_in_one_chat_mode(tmp_path, monkeypatch, thinking):
    """The plan's file, read by the services' client (each request's body) and by the patched benchmark.py's
    prompts.py (each prompt's chat-template call, as benchmark.py makes it): the same messages, tools and mode."""
    from gpuhosts.hostside.bench_probe import load_prompts, request_body

    document = plan_prompts(thinking)
    (tmp_path / "p").mkdir()
    (tmp_path / "p/prompts.json").write_text(json.dumps(document))
    monkeypatch.setenv("GPUHOSTS_HOST_ROOT", str(tmp_path))
    settings = {"model": "qwen", "_prompts": load_prompts("/p/prompts.json")}
    bodies = [request_body(None, settings, p["messages"], tools=p.get("tools")) for p in settings["_prompts"]["prompts"]]

    ddtree = patched_prompts_module(tmp_path)
    tokenizer = RecordingTokenizer()
    prompts = ddtree.load_prompts(str(tmp_path / "p/prompts.json"))
    for instance in prompts:
        messages = []
        for turn in ddtree.chat_turns(instance):
            messages.extend(turn)
            tokenizer.apply_chat_template(messages, tools=instance.get("tools"), tokenize=False,
                                          add_generation_prompt=True, enable_thinking=thinking)
    assert [c["messages"] for c in tokenizer.calls] == [b["messages"] for b in bodies]
    assert [c["tools"] for c in tokenizer.calls] == [b.get("tools") for b in bodies]
    assert [p["name"] for p in prompts] == ["shortChat", "code", "toolCall"]
    assert bodies[2]["tools"][0]["function"]["name"] == "get_weather" and bodies[2]["tool_choice"] == "auto"
    assert all(b["chat_template_kwargs"] == {"enable_thinking": thinking} for b in bodies)
    assert all(b["max_tokens"] == document["maxTokens"] for b in bodies)


@pytest.mark.parametrize("document, message", [
    ({"prompts": []}, "no prompts"),
    ({"prompts": [{"name": "x", "messages": [{"role": "user"}]}]}, "messages must be"),
    ({"prompts": [{"name": "x", "messages": [{"role": "user", "content": "hi"}], "tools": {}}]}, "tools must be"),
], ids=["empty", "a message without content", "tools not a list"])
def test_ddtree_refuses_a_prompts_file_it_cannot_answer(tmp_path, document, message):
    ddtree = patched_prompts_module(tmp_path)
    (tmp_path / "prompts.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match=message):
        ddtree.load_prompts(str(tmp_path / "prompts.json"))
