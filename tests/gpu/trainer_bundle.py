"""What the GPU run of the trainer needs, made here: the trainer stack scaled down, its plan, speculators' scripts.

    .venv/bin/python tests/gpu/trainer_bundle.py --speculators GIT_DIR --out build/gpu-trainer

The scaled stack is stacks/Pulumi.trainer.yaml with the values of tests/gpu/trainer-scale.yaml put in (sizes, the
GPU count, the step count; no flag), rendered by `gpuhosts plan` as any stack is. The GPU machine has neither
pulumi nor the network, so everything it runs comes from here: the plan's host tree (the launch script, the
hidden-state and drafter-config checks, the monitor's app), the DrafterConvert unit's ensure script, the
tokenizer calls of the DatasetPrepare unit read out of its ensure script word by word, and speculators'
scripts/ at the release's tag (GIT_DIR: a clone of vllm-project/speculators; the wheel ships no scripts/).
bundle.json says where each lies and the node paths the plan chose.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2]
STACK = PROJECT / "stacks/Pulumi.trainer.yaml"
SCALE = Path(__file__).resolve().parent / "trainer-scale.yaml"
SCRIPTS = ("scripts/train.py", "scripts/prepare_data.py", "scripts/launch_vllm.py")


def scaled_stack(stack: dict, scale: dict) -> dict:
    """The stack with each dotted path of `scale` replaced; a path that is not in the stack is an error, so a
    renamed key cannot pass unnoticed."""
    config = stack["config"]
    for dotted, value in scale.items():
        section, *rest = dotted.split(".")
        node, key = config, f"gpuhosts:{section}"
        for part in rest:
            if key not in node if isinstance(node, dict) else int(key) >= len(node):
                raise KeyError(f"{dotted}: {key} is not in {STACK.name}")
            node, key = node[key], (int(part) if isinstance(node[key], list) else part)
        if key not in node if isinstance(node, dict) else int(key) >= len(node):
            raise KeyError(f"{dotted}: {key} is not in {STACK.name}")
        node[key] = value
    return stack


def tokenize_calls(ensure: str) -> list[dict]:
    """The DatasetPrepare ensure script's `tokenize WHAT DIR KEY ARG…` calls, as the shell would split them."""
    calls, lines = [], ensure.splitlines()
    for index, line in enumerate(lines):
        if not line.lstrip().startswith("tokenize ") or line.lstrip().startswith("tokenize()"):
            continue
        words = []
        for part in lines[index:]:
            words.append(part.rstrip().removesuffix("\\"))
            if not part.rstrip().endswith("\\"):
                break
        what, directory, _key, *argv = shlex.split(" ".join(words))[1:]
        calls.append({"what": what, "dir": directory, "argv": argv})
    if not calls:
        raise ValueError("the DatasetPrepare ensure script makes no tokenize call")
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speculators", type=Path, required=True, help="git directory of vllm-project/speculators")
    parser.add_argument("--out", type=Path, default=PROJECT / "build/gpu-trainer")
    parser.add_argument("--scale", type=Path, default=SCALE,
                        help="the scale file: trainer-scale.yaml (one GPU) or trainer-scale-gpu8.yaml (eight)")
    args = parser.parse_args()

    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    stack = scaled_stack(yaml.safe_load(STACK.read_text()), yaml.safe_load(args.scale.read_text()))
    stack_file = out / "Pulumi.trainer.yaml"
    stack_file.write_text(yaml.safe_dump(stack, sort_keys=False))
    subprocess.run([str(PROJECT / ".venv/bin/gpuhosts"), "plan", "trainer", "--stack-file", str(stack_file),
                    "--out", str(out / "plan")], check=True, cwd=PROJECT)

    summary = json.loads((out / "plan/summary.json").read_text())
    training = summary["hosts"]["trainer"]["training"]
    version = training["environments"]["speculators"].split("==")[1]
    for script in SCRIPTS:
        target = out / "speculators-src" / script
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "--git-dir", str(args.speculators), "show", f"v{version}:{script}"],
                                          check=True, capture_output=True).stdout)

    host = out / "plan/hosts/trainer"
    commands = host / "commands"
    dataset_unit = next(p.name for p in commands.iterdir() if p.name.startswith("dataset-"))
    server_argv = training["server"]["argv"]
    bundle = {
        "speculators": version,
        "verifier": training["verifier"]["dir"], "verifierLayers": training["verifier"]["layers"],
        "drafter": training["startFrom"]["dir"], "converted": training["convert"]["dir"],
        "drafterChecks": training["convert"]["checks"],
        "checkpoints": training["training"]["checkpoints"], "log": training["training"]["log"],
        "smokeCheckpoints": next(p for p in summary["hosts"]["trainer"]["training"]["keptOnDestroy"]
                                 if p.endswith("-smoke")),
        "launchScript": training["training"]["script"],
        "serverUrl": training["server"]["url"],
        "statesDir": server_argv[server_argv.index("--hidden-states-path") + 1],
        "servedModel": server_argv[2],
        "serverLayers": training["layerIds"]["serverExtracts"],
        "monitorUnit": "etc/systemd/system/" + training["monitor"]["unit"],
        "convertEnsure": "plan/hosts/trainer/commands/drafter-convert/ensure.sh",
        "tokenize": tokenize_calls((commands / dataset_unit / "ensure.sh").read_text()),
        "dataset": training["dataset"],
    }
    (out / "bundle.json").write_text(json.dumps(bundle, indent=2) + "\n")
    print(f"bundle in {out}: speculators {version}, verifier {bundle['verifier']}, "
          f"{len(bundle['tokenize'])} tokenize call(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
