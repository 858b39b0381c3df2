"""Feed the training node's speculators invocations to speculators' own parsers, without a GPU and without training.

Run with the Python of an environment that has speculators installed:

    python tests/verify_engines/check_speculators.py [SCRIPTS_CHECKOUT] < invocations.json

stdin: a JSON list of invocations (gpuhosts.plans.training_node.engine_invocations: name, package, version,
program, argv, environment); those of another package are skipped. SCRIPTS_CHECKOUT: the repository checkout
that holds scripts/launch_vllm.py (and scripts/train.py for releases that train through it), at the release's tag.

Each argv goes to the parser the program itself uses:

* `scripts/train.py` and `speculators.train` (`torchrun -m speculators.train`): both end in
  `TrainConfig.resolve(argv)` (src/speculators/train/config/resolution.py resolve: argparse from the schema, then
  the cross-field rules such as --from-pretrained against --num-layers); it parses and validates, nothing more.
* `scripts/launch_vllm.py`: its `parse_args()` (argparse, parse_known_args) with sys.argv set to the argv; the
  words before `--` must all be its own.
* `speculators convert`: the typer app's click command, `make_context` only (parsing, no callback).
* `speculators.convert.convert_model` (0.7.x, no CLI for dflash): the function's signature bound to the words.

Prints exactly one line on stdout: `VERIFY {"ok": bool, "reason": str, "flags": {program: {flag: {"takesValue":
bool, "choices": list|null, "required": bool}}}}`; everything the packages print goes to stderr. (For
convert_model the "flags" are its keyword parameters.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import io
import json
import sys
import typing
from pathlib import Path


def argparse_flags(parser: argparse.ArgumentParser, required: set[str] = frozenset()) -> dict:
    table = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for option in action.option_strings:
            table[option] = {"takesValue": action.nargs != 0,
                             "choices": [c for c in action.choices] if action.choices else None,
                             "required": action.required or option in required}
    return table


def check_train(invocation: dict, checkout: Path | None) -> tuple[str | None, dict]:
    from speculators.train.config import TrainConfig, resolution

    program = invocation["program"]
    if program == "scripts/train.py" and checkout is not None:
        # Without a checkout the argv still goes to TrainConfig, the parser scripts/train.py uses.
        source = (checkout / "scripts/train.py").read_text()
        if "TrainConfig.resolve()" not in source:
            return "scripts/train.py of this checkout does not resolve its argv through TrainConfig", {}
    elif importlib.util.find_spec("speculators.train.__main__") is None:
        return "this speculators has no speculators.train module to run with torchrun -m", {}
    # Required values are checked after the layers merge (resolution._validate_required), not by argparse.
    flags = argparse_flags(resolution.build_parser(), set(getattr(resolution, "REQUIRED_FLAGS", {}).values()))
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            TrainConfig.resolve(list(invocation["argv"]))
    except SystemExit as exit_:
        message = stderr.getvalue().strip().splitlines()
        return f"TrainConfig.resolve exited {exit_.code}: {message[-1] if message else ''}", flags
    return None, flags


def check_launch(invocation: dict, checkout: Path | None) -> tuple[str | None, dict]:
    if checkout is None:
        return None, {}  # not in the wheel: checked only with a checkout (argv[1]); main() says so
    path = checkout / "scripts/launch_vllm.py"
    spec = importlib.util.spec_from_file_location("launch_vllm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines parse_args; main() runs only as __main__
    parsers = []
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, *args, **kwargs):
        parsers.append(self)
        return original(self, *args, **kwargs)

    argv = list(invocation["argv"])
    stderr = io.StringIO()
    saved = sys.argv
    try:
        argparse.ArgumentParser.parse_known_args = capture
        sys.argv = [str(path), *argv]
        with contextlib.redirect_stderr(stderr):
            args, rest = module.parse_args()
    except SystemExit as exit_:
        return f"launch_vllm.py parse_args exited {exit_.code}: {stderr.getvalue().strip()}", \
            argparse_flags(parsers[0]) if parsers else {}
    finally:
        argparse.ArgumentParser.parse_known_args = original
        sys.argv = saved
    flags = argparse_flags(parsers[0])
    after = argv[argv.index("--"):] if "--" in argv else []
    if rest != after:
        stray = [w for w in rest if w not in after]
        return f"launch_vllm.py does not know {stray} (they would reach vllm serve)", flags
    if args.hidden_states_backend != "file":
        return f"hidden-states backend {args.hidden_states_backend}, the node reads files", flags
    return None, flags


def check_cli(invocation: dict, name: str = "convert") -> tuple[str | None, dict]:
    """A `speculators NAME` console-script invocation, through the typer app's click command."""
    import typer

    try:
        from speculators.cli import app
    except ImportError:
        from speculators.__main__ import app
    # Typer may bring its own copy of click (typer 0.29 has typer._click): use the classes of the command it
    # built, by their attributes, rather than those of an installed click.
    group = typer.main.get_command(app)
    command = group.commands.get(name) if hasattr(group, "commands") else None
    if command is None:
        return f"this speculators has no `speculators {name}`", {}
    flags = {}
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option":
            continue
        # click: param.type is a click.Choice; typer 0.29: param.type_descriptor says is_choice and its choices.
        kind = getattr(param, "type", None) or getattr(param, "type_descriptor", None)
        choices = getattr(kind, "choices", None)
        if getattr(kind, "is_choice", True) is False:
            choices = None
        choices = [getattr(c, "value", c) for c in choices] if choices else None
        for option in [*param.opts, *param.secondary_opts]:
            flags[option] = {"takesValue": not param.is_flag, "choices": choices, "required": bool(param.required)}
    try:
        command.make_context(name, list(invocation["argv"]))
    except Exception as error:  # click's UsageError / BadParameter / Exit, whichever copy of click raised it
        message = error.format_message() if hasattr(error, "format_message") else type(error).__name__
        return f"`speculators {name}` refused the argv: {message}", flags
    return None, flags


def check_convert_api(invocation: dict) -> tuple[str | None, dict]:
    from speculators.convert import convert_model

    signature = inspect.signature(convert_model)
    flags = {}
    for name, param in signature.parameters.items():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        choices = list(typing.get_args(param.annotation)) if typing.get_origin(param.annotation) is typing.Literal \
            else None
        flags[name] = {"takesValue": True, "choices": choices, "required": param.default is param.empty}
    words = list(invocation["argv"])
    if len(words) != 4:
        return f"convert_model takes model, verifier, algorithm, output path; got {words}", flags
    model, verifier, algorithm, output = words
    try:
        signature.bind(model=model, verifier=verifier, algorithm=algorithm, output_path=output)
    except TypeError as error:
        return f"convert_model refuses the arguments: {error}", flags
    allowed = flags["algorithm"]["choices"]
    if allowed is not None and algorithm not in allowed:
        return f"convert_model's algorithm is one of {allowed}, not {algorithm!r}", flags
    if algorithm == "dflash" and importlib.util.find_spec("speculators.convert.dflash") is None:
        return "this speculators has no DFlash converter", flags
    return None, flags


CHECKS = {
    "scripts/train.py": check_train,
    "speculators.train": check_train,
    "scripts/launch_vllm.py": check_launch,
    "speculators convert": lambda invocation, checkout: check_cli(invocation, "convert"),
    "speculators prepare-data": lambda invocation, checkout: check_cli(invocation, "prepare-data"),
    "speculators.convert.convert_model": lambda invocation, checkout: check_convert_api(invocation),
}


def main(argv: list[str]) -> int:
    checkout = Path(argv[0]) if argv else None
    if checkout is not None and checkout.name == "scripts":
        checkout = checkout.parent
    invocations = [i for i in json.load(sys.stdin) if i.get("package") == "speculators"]
    flags: dict[str, dict] = {}
    problems: list[str] = []
    with contextlib.redirect_stdout(sys.stderr):
        if not invocations:
            problems.append("no speculators invocation given")
        for invocation in invocations:
            check = CHECKS.get(invocation["program"])
            if check is None:
                problems.append(f"{invocation['name']}: no parser known for program {invocation['program']!r}")
                continue
            try:
                reason, table = check(invocation, checkout)
            except Exception as error:  # a broken environment is a finding, not a crash
                reason, table = f"{type(error).__name__}: {error}", {}
            flags[invocation["program"]] = table
            if reason:
                problems.append(f"{invocation['name']}: {reason}")
    unchecked = sorted(p for p, table in flags.items() if not table)
    reason = "; ".join(problems) or "every argv parses" + (
        f" ({', '.join(unchecked)} not checked: no repository checkout given)" if unchecked else "")
    result = {"ok": not problems, "reason": reason, "flags": flags}
    print("VERIFY " + json.dumps(result, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
