"""The one rendering rule: a config value is data, never code.

A value reaches a bash script only as a quoted word (`| q`, `| bash_array`, `install(...)`), a comment only through
`| comment` (which refuses control characters), an embedded script only through `| heredoc(DELIMITER)`, a systemd
unit only through `| systemd('Setting')` (gpuhosts.render.systemd_value) or, on a comment line, `| comment`, and a
Python file only as a JSON literal (`| tojson`) or in a comment. The lint below reads every template and tracks
bash's quoting up to each `{{ … }}`, so a quoted word inside a double-quoted string or a `comment` outside a
comment is caught as well as a raw value. The behavioural tests then render both stacks with hostile values that
the config accepts, and run them against the simulated host.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from jinja2 import nodes

from conftest import KPRO5_SECRETS, READY_CAP_S, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack
from gpuhosts.protocol import parse_facts
from gpuhosts.provider import refreshed_facts
from gpuhosts.render import TEMPLATES, _ENV, refuse_control, systemd_value
from gpuhosts.stacks import validate_trainer_stack

# The environment's globals: protocol constants (gpuhosts/protocol.py), never config.
GLOBALS = {"result_prefix", "facts_prefix", "lock_wait_prefix", "no_change_result"}
# Raw expressions that are not config values, each with the reason it may stay raw.
ALLOWLIST = {
    ("common/probe.sh.j2", "prelude"):
        "bash helpers rendered from the probe-helper templates, which this lint reads as templates of their own",
    ("common/probe.sh.j2", "fact.probe"):
        "a bash expression built by gpuhosts/facts.py and the components; the values in it are shlex-quoted where "
        "it is built, and the behavioural tests below run the probes with hostile values",
    ("common/hostside-script.py.j2", "source"): "gpuhosts/hostside/gate_probe.py verbatim: code of this repository",
    ("benchmark/bench.py.j2", "source"): "gpuhosts/hostside/bench_probe.py verbatim: code of this repository",
    ("ddtree_reference/ddtree-result.py.j2", "source"): "gpuhosts/hostside/ddtree_result.py verbatim",
    ("hidden_state_server/check-hidden-states.py.j2", "source"): "gpuhosts/hostside/hidden_state_check.py verbatim",
    ("drafter_convert/check-drafter-config.py.j2", "source"): "gpuhosts/hostside/drafter_config.py verbatim",
    ("benchmark/prompts.json.j2", "text"):
        "the whole document is json.dumps of the plan's data (gpuhosts/plans/benchmark.py prompts_file): JSON's own "
        "encoder writes every value",
}
# modprobe.d runs an `install` line through /bin/sh, so its files follow the bash rules; modules-load.d has only
# module names and comments.
BASH_CONFIG_FILES = {"vfio_binding/modprobe-vfio.conf.j2", "vfio_binding/modules-load-vfio.conf.j2",
                     "nvidia_driver/nouveau-blacklist.conf.j2"}

_PIECES = re.compile(r"({{#.*?#}}|{%.*?%}\n?|{{.*?}})", re.S)
HOLE = "\x00"


def kind_of(name: str) -> str:
    if name.endswith(".service.j2") or name == "inference_service/service.j2":
        return "systemd"
    if name.endswith(".sh.j2") or name in BASH_CONFIG_FILES:
        return "bash"
    if name.endswith(".py.j2"):
        return "python"
    if name.endswith(".json.j2"):
        return "json"
    raise AssertionError(f"templates/{name}: no rendering rule says what this template produces; add it here")


@dataclass
class Hole:
    source: str  # the expression, without its braces
    expr: nodes.Expr
    line: int
    context: str = ""  # where bash would read it: top, cmd, dq, sq, brace, comment or heredoc
    delimiter: str = ""  # the here-document it sits in


def holes(name: str) -> tuple[str, list[Hole]]:
    """The template's text with each `{{ … }}` replaced by HOLE (block tags dropped, as trim_blocks drops the newline
    after them), and the expressions in order."""
    source = (TEMPLATES / name).read_text()
    text, found, position = [], [], 0
    for index, piece in enumerate(_PIECES.split(source)):
        if index % 2 == 0:
            text.append(piece)
        elif piece.startswith("{{") and not piece.startswith("{{#"):
            (output,) = _ENV.parse(piece).body
            found.append(Hole(piece[2:-2].strip(), output.nodes[0], source.count("\n", 0, position) + 1))
            text.append(HOLE)
        position += len(piece)
    expressions = sum(1 for out in _ENV.parse(source).find_all(nodes.Output) for n in out.nodes
                      if not isinstance(n, nodes.TemplateData))
    assert expressions == len(found), f"templates/{name}: the lint missed an expression"
    return "".join(text), found


def bash_contexts(name: str, text: str, found: list[Hole]) -> None:
    """Set each hole's context by reading `text` the way bash quotes it."""
    stack: list[list] = [["top", 0]]
    pending: list[str] = []
    hole_index = 0
    i = 0
    while i < len(text):
        frame = stack[-1]
        kind, c = frame[0], text[i]
        if c == HOLE:
            found[hole_index].context = kind
            found[hole_index].delimiter = frame[1] if kind == "heredoc" else ""
            hole_index += 1
            i += 1
            continue
        if kind == "heredoc":
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            if text[i:end] == frame[1]:
                stack.pop()
                i = end + 1
                continue
            while i < end:
                if text[i] == HOLE:
                    found[hole_index].context, found[hole_index].delimiter = "heredoc", frame[1]
                    hole_index += 1
                i += 1
            i = end + 1
            continue
        if kind == "comment":
            if c == "\n":
                stack.pop()
                continue  # the newline ends the command line too (and may start a here-document)
            i += 1
            continue
        if kind == "sq":
            if c == "'":
                stack.pop()
            i += 1
            continue
        two = text[i:i + 2]
        if c == "\\":
            i += 2
            continue
        if two in ("$(", "${") or (two == "<(" and kind != "dq"):
            stack.append(["cmd" if two != "${" else "brace", 0])
            i += 2
            continue
        if kind == "dq":
            if c == '"':
                stack.pop()
            i += 1
            continue
        # top, cmd (a command substitution) and brace (a parameter expansion) read quotes and comments alike.
        if c == "'":
            stack.append(["sq", 0])
        elif c == '"':
            stack.append(["dq", 0])
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;|&("):
            stack.append(["comment", 0])
        elif text.startswith("<<<", i):
            i += 3
            continue
        elif two == "<<":
            match = re.match(r"<<-?\s*(?:'([^']+)'|\"([^\"]+)\"|(\w+))", text[i:])
            assert match, f"templates/{name}: a here-document the lint cannot read"
            pending.append(next(g for g in match.groups() if g))
            i += match.end()
            continue
        elif kind == "cmd" and c == "(":
            frame[1] += 1
        elif kind == "cmd" and c == ")":
            if frame[1]:
                frame[1] -= 1
            else:
                stack.pop()
        elif kind == "brace" and c == "}":
            stack.pop()
        elif c == "\n" and pending:
            for delimiter in reversed(pending):
                stack.append(["heredoc", delimiter])
            pending.clear()
        i += 1
    assert [f[0] for f in stack] == ["top"] and not pending, \
        f"templates/{name}: the lint lost track of bash's quoting (ends inside {stack[-1][0]})"


def _filter_arg(expr: nodes.Filter) -> str | None:
    return expr.args[0].value if expr.args and isinstance(expr.args[0], nodes.Const) else None


def bash_problem(hole: Hole) -> str | None:
    return _bash_expression_problem(hole, hole.expr)


def _bash_expression_problem(hole: Hole, expr: nodes.Expr | None) -> str | None:
    # Literal text of the template (an inline if between two strings) is no value.
    if expr is None or isinstance(expr, nodes.Const):
        return None
    if isinstance(expr, nodes.CondExpr):
        return _bash_expression_problem(hole, expr.expr1) or _bash_expression_problem(hole, expr.expr2)
    if isinstance(expr, nodes.Name) and expr.name in GLOBALS:
        return None
    if isinstance(expr, nodes.Call) and isinstance(expr.node, nodes.Name) and expr.node.name == "install":
        return None if hole.context == "top" else f"install(...) inside {hole.context}"
    if isinstance(expr, nodes.Filter):
        if expr.name in ("q", "bash_array"):
            return None if hole.context in ("top", "cmd") else \
                f"a quoted word inside {hole.context}: put it in a variable first and use \"$name\""
        if expr.name == "comment":
            return None if hole.context == "comment" else f"| comment outside a comment (in {hole.context})"
        if expr.name == "heredoc":
            return None if hole.context == "heredoc" and _filter_arg(expr) == hole.delimiter else \
                f"| heredoc({_filter_arg(expr)!r}) not in the here-document it names"
    return "a raw value: quote it (| q), or in a comment use | comment"


def line_of(name: str, hole: Hole) -> str:
    return (TEMPLATES / name).read_text().splitlines()[hole.line - 1]


def systemd_problem(name: str, hole: Hole) -> str | None:
    line = line_of(name, hole)
    expr = hole.expr
    if isinstance(expr, nodes.Const) or (isinstance(expr, nodes.CondExpr) and
                                         all(isinstance(e, (nodes.Const, type(None))) for e in (expr.expr1, expr.expr2))):
        return None if line.startswith("#") else "literal text belongs in the template"
    if line.startswith(("#", ";")):
        return None if isinstance(expr, nodes.Filter) and expr.name == "comment" else "a comment line takes | comment"
    setting = re.match(r"^(\w+)=", line)
    if not isinstance(expr, nodes.Filter) or expr.name != "systemd":
        return "a raw value: escape it with | systemd('Setting')"
    if not setting or _filter_arg(expr) != setting[1]:
        return f"| systemd({_filter_arg(expr)!r}) on a line that sets {setting[1] if setting else 'nothing'}"
    return None


def python_problem(name: str, hole: Hole) -> str | None:
    line = line_of(name, hole)
    expr = hole.expr
    if isinstance(expr, nodes.Filter) and expr.name == "comment":
        return None if line.lstrip().startswith("#") else "| comment outside a comment"
    if isinstance(expr, nodes.Filter) and expr.name == "tojson":
        return None if not line.lstrip().startswith("#") else "| tojson in a comment"
    return "a raw value: write it as a Python literal (| tojson) or in a comment (| comment)"


def template_names() -> list[str]:
    return sorted(str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*.j2"))


def lint(name: str) -> list[str]:
    kind = kind_of(name)
    text, found = holes(name)
    if kind == "bash":
        bash_contexts(name, text, found)
    problems, used = [], set()
    for hole in found:
        key = (name, re.sub(r"\s+", "", hole.source))
        if key in {(n, re.sub(r"\s+", "", s)) for n, s in ALLOWLIST}:
            used.add(key)
            continue
        problem = {"bash": lambda: bash_problem(hole), "systemd": lambda: systemd_problem(name, hole),
                   "python": lambda: python_problem(name, hole),
                   "json": lambda: "a value in JSON: encode the whole document with json.dumps in the plan"}[kind]()
        if problem:
            problems.append(f"templates/{name}:{hole.line}: {{{{ {hole.source} }}}}: {problem}")
    return problems


def test_every_expression_of_every_template_follows_the_rule():
    problems = [problem for name in template_names() for problem in lint(name)]
    assert not problems, "config values must go through the quoting filters:\n" + "\n".join(problems)


def test_every_allowlist_entry_is_still_needed():
    for name, source in ALLOWLIST:
        _text, found = holes(name)
        assert any(re.sub(r"\s+", "", h.source) == source for h in found), f"stale allowlist entry {name}: {source}"


@pytest.mark.parametrize("template, problem", [
    ('say "hello {{ x }}"\n', "a raw value"),
    ('say "hello {{ x | q }}"\n', "a quoted word inside dq"),
    ("say {{ x | comment }}\n", "| comment outside a comment"),
    ("# {{ x | q }}\n", "a quoted word inside comment"),
    ("x=\"$(cat <<'A'\n{{ x | heredoc('B') }}\nA\n)\"\n", "not in the here-document it names"),
    ("y={{ 'container %s' % x }}\n", "a raw value"),
])
def test_the_lint_catches_each_kind_of_mistake(template, problem, tmp_path, monkeypatch):
    """The check above can fail: each way of letting a value through is reported with file and line."""
    rule = sys.modules[__name__]

    (tmp_path / "bad.sh.j2").write_text(template)
    monkeypatch.setattr(rule, "TEMPLATES", tmp_path)
    (found,) = rule.lint("bad.sh.j2")
    assert found.startswith("templates/bad.sh.j2:") and problem in found, found


def test_the_lint_reads_nested_quoting():
    """Quotes inside a command substitution inside a double-quoted string, and a here-document inside those."""
    text, found = holes("common/probe.sh.j2")
    bash_contexts("common/probe.sh.j2", text, found)
    contexts = {h.source: h.context for h in found}
    assert contexts["inner | heredoc('GPUHOSTS_INNER')"] == "heredoc"
    assert contexts["facts_prefix"] == "dq"
    assert contexts["fact.name | q"] == "top" and contexts["fact.probe"] == "cmd"


# --- the filters themselves -------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\tb", "a\x00b", "a\x1bb", "a\x7fb"])
def test_control_characters_are_refused_naming_the_purpose(value):
    with pytest.raises(ValueError, match="WorkingDirectory= of the test unit"):
        systemd_value(value, "WorkingDirectory= of the test unit")
    with pytest.raises(ValueError, match="a comment in templates/"):
        _ENV.from_string("# {{ x | comment }}").render(x=value)
    with pytest.raises(ValueError, match="the purpose"):
        refuse_control(value, "the purpose")


@pytest.mark.parametrize("value, kind, written", [
    ("50%", "text", "50%%"), ("$HOME", "text", "$HOME"), ("it's \"x\"", "text", "it's \"x\""),
    ("$HOME", "word", "'$HOME'"), ("A=50%", "word", "'A=50%%'"), ("A=it's", "word", '"A=it\'s"'),
    ("A=b\\c", "word", '"A=b\\\\c"'), ("$HOME", "exec", "'$$HOME'"), ("a\"b", "exec", "'a\"b'"),
    ("'$(x)'", "exec", '"\'$$(x)\'"'),
])
def test_systemd_escaping(value, kind, written):
    """Environment= takes `$` as itself (systemd.exec(5): "$ has no special meaning"); ExecStart= expands it."""
    assert systemd_value(value, "test", kind) == written


def test_a_unit_line_cannot_be_continued_by_a_value():
    with pytest.raises(ValueError, match="continue the unit line"):
        systemd_value("C:\\", "Description= of the test unit")


def test_an_embedded_script_cannot_end_its_here_document():
    template = _ENV.from_string("x=\"$(cat <<'GPUHOSTS_INNER'\n{{ s | heredoc('GPUHOSTS_INNER') }}\nGPUHOSTS_INNER\n)\"")
    with pytest.raises(ValueError, match="contains the line GPUHOSTS_INNER"):
        template.render(s="echo '\nGPUHOSTS_INNER\ntouch /tmp/x\n'")


# --- behaviour: hostile values the config accepts ---------------------------------------------------------------

def hostile(canary: Path, tag: str) -> str:
    """A value that runs `touch` wherever it is read as code, with every quoting character bash and systemd know."""
    return f"x$(touch {canary}-{tag}-s)`touch {canary}-{tag}-b`;touch {canary}-{tag}-c \\'\"%h"


def accepted(validate, values, secrets, changes) -> tuple[dict, list[str]]:
    """The values with every change the config accepts on its own applied; the names of those it refused."""
    refused = []
    for name, change in changes.items():
        trial = json.loads(json.dumps(values))
        change(trial)
        try:
            validate(trial, secrets)
        except ConfigError:
            refused.append(name)
            continue
        change(values)
    validate(values, secrets)
    return values, refused


def kpro5_changes(canary: Path) -> dict:
    def service(v, i=0):
        return v["services"][i]

    return {
        "hostname": lambda v: v["containers"][0].update(hostname=hostile(canary, "hostname")),
        "environment": lambda v: service(v).update(environment={"GPUHOSTS_TEST": hostile(canary, "env")}),
        "extraArgs": lambda v: service(v).update(extraArgs=["--gpuhosts-test", hostile(canary, "arg")]),
        "servedModelName": lambda v: service(v, 1).update(servedModelName=hostile(canary, "served")),
        "reasoningParser": lambda v: service(v, 1).update(reasoningParser=hostile(canary, "parser")),
        "localDir": lambda v: service(v, 1)["speculative"]["drafter"].update(
            localDir=f"/srv/models/{hostile(canary, 'dir')}/Qwen3.6-27B-DFlash"),
    }


def trainer_changes(canary: Path) -> dict:
    def training(v):
        return v["training"]

    return {
        "hyper.extraArgs": lambda v: training(v)["hyper"].update(extraArgs=["--gpuhosts-test", hostile(canary, "hyper")]),
        "server.extraArgs": lambda v: training(v)["server"].update(extraArgs=["--gpuhosts-test",
                                                                              hostile(canary, "server")]),
        "checkpoints": lambda v: training(v).update(
            checkpoints=f"/data/checkpoints/{hostile(canary, 'ckpt')}"),
        "drafter.localDir": lambda v: training(v)["drafter"].update(
            localDir=f"/data/models/{hostile(canary, 'drafter')}/drafter"),
        "node.gpus.model": lambda v: v["node"]["gpus"].update(model=hostile(canary, "gpu")),
    }


def all_scripts(graph) -> list[tuple[str, str]]:
    from embedded_scripts import inner_scripts

    found = []
    for unit in graph:
        for operation in ("ensure", "teardown", "probe"):
            text = getattr(unit, operation)
            found += [(f"{unit.key}/{operation}", text)] + [(f"{unit.key}/{operation}-inner", t)
                                                           for t in inner_scripts(text)]
        found += [(f"{unit.key}{f.path}", f.content) for f in unit.files if f.content.startswith("#!/bin/")]
    return found


def check_syntax(scripts: list[tuple[str, str]], tmp_path: Path) -> None:
    for name, text in scripts:
        script = tmp_path / "script.sh"
        script.write_text(text)
        shell = "sh" if text.startswith("#!/bin/sh\n") else "bash"
        result = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stderr}"


def check_units(graph, tmp_path: Path) -> None:
    """Every unit parses clean, and the hostile text arrives in it only escaped: `$` doubled on ExecStart=, `%`
    doubled everywhere but in comments."""
    from systemd_scratch import place, verify

    root = tmp_path / "units"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for unit in graph:
        for file in unit.files:
            if not file.path.endswith(".service"):
                continue
            result = verify(root, place(root, file.path, file.content))
            assert result.returncode == 0 and result.stderr == "", f"{file.path}: {result.stderr}"
            for line in file.content.splitlines():
                if line.startswith("#"):
                    continue
                assert not re.search(r"(?<!%)%h", line), f"{file.path}: an unescaped specifier: {line}"
                if line.startswith("ExecStart="):
                    assert "$(" not in line.replace("$$(", ""), f"{file.path}: an unescaped $: {line}"


@pytest.fixture
def canary(tmp_path) -> Path:
    return tmp_path / "canary"


def no_canary(canary: Path) -> None:
    fired = sorted(p.name for p in canary.parent.iterdir() if p.name.startswith(canary.name))
    assert not fired, f"a config value ran as code: {fired}"


def test_kpro5_with_hostile_values_renders_valid_scripts_and_units(canary, tmp_path):
    from gpuhosts.plans.proxmox_host import plan_host

    values, refused = accepted(validate_stack, kpro5_values(), KPRO5_SECRETS, kpro5_changes(canary))
    assert len(refused) < len(kpro5_changes(canary)), "the config refuses every hostile value: nothing is tested"
    graph = plan_host(validate_stack(values, KPRO5_SECRETS))
    check_syntax(all_scripts(graph), tmp_path)
    check_units(graph, tmp_path)


def test_trainer_with_hostile_values_renders_valid_scripts_and_units(canary, tmp_path):
    from gpuhosts.plans.training_node import plan_training_node

    values, refused = accepted(validate_trainer_stack, trainer_values(), TRAINER_SECRETS, trainer_changes(canary))
    assert len(refused) < len(trainer_changes(canary)), "the config refuses every hostile value: nothing is tested"
    graph = plan_training_node(validate_trainer_stack(values, TRAINER_SECRETS)).graph
    check_syntax(all_scripts(graph), tmp_path)
    check_units(graph, tmp_path)


def unit_file_reads_back(content: str) -> tuple[list[str], dict[str, str]]:
    """ExecStart= and Environment= of a unit as the simulated host's systemd reads them."""
    from fakehost.systemd import exec_words, parse_unit, specifiers

    parsed = parse_unit(content)
    (line,) = parsed["Service.ExecStart"]
    environment = dict(specifiers(word).split("=", 1) for e in parsed.get("Service.Environment", [])
                       for word in shlex.split(e))
    return exec_words(line), environment


def run_all(units, tree: Path, operation: str, stdin: dict[str, str]) -> None:
    from fakehost import host_env

    for unit in units if operation != "teardown" else reversed(units):
        given = stdin[unit.stdin_secret] + "\n" if unit.stdin_secret and operation == "ensure" else ""
        result = subprocess.run(["bash", "-c", getattr(unit, operation)], input=given, capture_output=True, text=True,
                                env=host_env(tree), timeout=180)
        assert result.returncode == 0, f"{unit.key} {operation} failed:\n{result.stdout}\n{result.stderr}"
        if operation == "probe":
            # After a converge every declared fact holds: the hostile values were written where they belong (a key
            # file compared with its secret, as the provider compares it).
            facts = refreshed_facts(unit.desired, parse_facts(result.stdout), unit.key, stdin.get)[0]
            assert facts == unit.desired, f"{unit.key}: {facts} != {unit.desired}"


def test_kpro5_with_hostile_values_converges_and_tears_down_on_the_simulated_host(canary, tmp_path):
    from gpuhosts.plans.inference_service import render_service
    from gpuhosts.plans.proxmox_host import plan_host
    from engine_standin import Engine, start_engine
    from fakehost.installer import make_fake_run
    from fakehost.tree import seed_kpro5
    from sshhost import free_port
    from services_data import API_KEY, SECRETS

    run_file = tmp_path / "NVIDIA-Linux-x86_64-580.126.09.run"
    base = kpro5_values()
    base["nvidia"].update(url=f"file://{run_file}", sha256=make_fake_run(run_file, "580.126.09"))
    tree = seed_kpro5(tmp_path / "kpro5")
    for service in base["services"]:
        # The gate talks to 127.0.0.1 of the machine running the tests: ports of our own, quick timeouts.
        service.update(port=free_port(), bind="127.0.0.1")
        service["gate"].update(readyTimeoutS=READY_CAP_S, maxTokens=64)
    values, _refused = accepted(validate_stack, base, KPRO5_SECRETS, kpro5_changes(canary))
    stack = validate_stack(values, KPRO5_SECRETS)
    for service in stack.services:
        argv, environment = unit_file_reads_back(render_service(service, stack).unit.content)
        assert (argv, environment) == (list(render_service(service, stack).argv), render_service(service, stack).environment)
    units = plan_host(stack).apply_order
    engine = start_engine(Engine(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=API_KEY),
                          values["services"][0]["port"])
    try:
        run_all(units, tree, "ensure", SECRETS)
        no_canary(canary)
        run_all(units, tree, "probe", SECRETS)
        run_all(units, tree, "teardown", SECRETS)
    finally:
        engine.shutdown()
        engine.server_close()
    no_canary(canary)


def test_trainer_with_hostile_values_trains_and_tears_down_on_the_simulated_node(canary, tmp_path):
    from gpuhosts.plans.training_node import plan_training_node
    from fakehost import host_env
    from trainer_node import StateServer, node_values, prepare_node

    tree = prepare_node(tmp_path)
    base = node_values(tmp_path)
    base["training"]["deleteCheckpointsOnDestroy"] = True
    changes = trainer_changes(canary)
    gpu_model = changes.pop("node.gpus.model")  # the pre-flight refuses another GPU model: tried on its own below
    values, refused = accepted(validate_trainer_stack, base, TRAINER_SECRETS, changes)
    plan = plan_training_node(validate_trainer_stack(values, TRAINER_SECRETS))
    units = plan.graph.apply_order
    (server_unit,) = [f for f in plan.graph["hidden-state-server"].files if f.path.endswith(".service")]
    assert unit_file_reads_back(server_unit.content) == (plan.summary["server"]["argv"],
                                                         plan.summary["server"]["environment"])
    server = StateServer(tree / "data/hidden_states", values["training"]["server"]["port"])
    try:
        run_all(units, tree, "ensure", {"hfToken": "hf_RenderingRuleToken"})
        script = tree / plan.summary["training"]["script"].lstrip("/")
        launch = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=host_env(tree), timeout=120)
        assert launch.returncode == 0, launch.stdout + launch.stderr
        no_canary(canary)
        run_all(units, tree, "probe", {})
        run_all(units, tree, "teardown", {})
    finally:
        server.close()
    no_canary(canary)
    # torchrun got each hostile value as it was written (its stand-in records the argv joined by spaces).
    recorded = (tree / "var/log/fakehost/torchrun.log").read_text().splitlines()[-1]
    assert f"--save-path {plan.summary['training']['checkpoints']} " in recorded, recorded
    if "hyper.extraArgs" not in refused:
        assert f" --gpuhosts-test {hostile(canary, 'hyper')} --from-pretrained " in recorded, recorded

    refused_model = json.loads(json.dumps(values))
    gpu_model(refused_model)
    try:
        preflight = plan_training_node(validate_trainer_stack(refused_model, TRAINER_SECRETS)).graph["preflight"]
    except ConfigError:
        return
    result = subprocess.run(["bash", "-c", preflight.ensure], capture_output=True, text=True, env=host_env(tree),
                            timeout=60)
    assert result.returncode == 1 and f"not a {refused_model['node']['gpus']['model']}" in result.stderr, result.stderr
    no_canary(canary)


def test_a_hostile_model_store_is_mounted_and_unmounted_as_data(canary, tmp_path):
    from gpuhosts.plans.proxmox_host import plan_host
    from fakehost.tree import seed_kpro5

    def store(values):
        values["containers"][0]["modelStore"] = {"hostPath": f"/tank/{hostile(canary, 'store')}",
                                                 "path": f"/srv/{hostile(canary, 'mount')}"}
        for service in values["services"]:
            service["weightsOn"] = "host"
            for spec in (service["model"], service["speculative"].get("drafter")):
                if spec:
                    spec["localDir"] = f"/srv/{hostile(canary, 'mount')}/{spec['repo'].split('/')[1]}"

    values, refused = accepted(validate_stack, kpro5_values(), KPRO5_SECRETS, {"modelStore": store})
    if refused:
        pytest.skip("the config refuses these model store paths")
    graph = plan_host(validate_stack(values, KPRO5_SECRETS))
    check_syntax(all_scripts(graph), tmp_path)
    tree = seed_kpro5(tmp_path / "kpro5")
    (tree / "tank").mkdir()
    (unit,) = [u for u in graph if u.kind == "ModelStore"]
    run_all([unit], tree, "ensure", {})
    assert (tree / f"tank/{hostile(canary, 'store')}/.gpuhosts-model-store").is_file()
    run_all([unit], tree, "probe", {})
    run_all([unit], tree, "teardown", {})
    no_canary(canary)
