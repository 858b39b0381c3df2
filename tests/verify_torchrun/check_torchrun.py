"""Parse the planned multi-node trainer command line with torchrun's own parser, and record what it read.

    .venv/bin/python tests/verify_torchrun/check_torchrun.py [--python build/engines/speculators-0.7.0-py3.12/bin/python]

The project's interpreter plans the two-node example of tests/multi_node_data.py; the speculators environment's
interpreter (the locked one `make verify-engines` installs into build/engines/, torch 2.13.0 in speculators 0.7.0's
lock) imports torch.distributed.run and runs `get_args_parser().parse_args(argv)` and `config_from_args(args)`,
what `torchrun` itself does before it launches (torch/distributed/run.py `run`). It ends with one line,
`torchrun: torch-<version> nodes=<n> argv=ok`, and rewrites tests/fixtures/torchrun/parsed.json, which the quick
tier holds the plan to. Nothing starts a process group: the rendezvous is parsed, not joined.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
FIXTURE = PROJECT / "tests" / "fixtures" / "torchrun" / "parsed.json"
DEFAULT_PYTHON = PROJECT / "build" / "engines" / "speculators-0.7.0-py3.12" / "bin" / "python"

# Run by the speculators environment's interpreter: torch and the standard library only.
PARSE = r"""
import dataclasses, json, sys
import torch
from torch.distributed.run import config_from_args, get_args_parser
argv = json.loads(sys.stdin.read())
args = get_args_parser().parse_args(argv)
config, program, program_args = config_from_args(args)
launch = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
json.dump({"torch": torch.__version__.split("+")[0], "argv": argv,
           "parsed": {k: v for k, v in vars(args).items() if isinstance(v, (str, int, bool, type(None), list))},
           "launchConfig": {k: v for k, v in launch.items() if isinstance(v, (str, int, float, bool, type(None)))},
           # A script runs under the launching interpreter (sys.executable), whose path is this machine's.
           "program": "<python>" if program == sys.executable else str(program), "programArgs": program_args},
          sys.stdout, indent=2, sort_keys=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", type=Path, default=DEFAULT_PYTHON, help="an interpreter with the pinned torch")
    args = parser.parse_args()
    if not args.python.exists():
        print(f"{args.python} is missing: run `make verify-engines` first (it installs speculators' lock)")
        return 2
    sys.path[:0] = [str(PROJECT / "tests"), str(PROJECT)]
    from multi_node_data import planned, two_nodes

    plan = planned(two_nodes())
    argvs = {json.dumps(node["argv"]) for node in plan["nodes"]}
    if len(argvs) != 1:
        print(f"torchrun: the nodes' command lines differ: {sorted(argvs)}")
        return 1
    argv = plan["nodes"][0]["argv"][1:]
    done = subprocess.run([str(args.python), "-c", PARSE], input=json.dumps(argv), capture_output=True, text=True)
    if done.returncode != 0:
        print(f"torchrun: its parser refused the planned command line:\n{done.stderr[-3000:]}")
        return 1
    parsed = json.loads(done.stdout)
    launch = parsed["launchConfig"]
    ok = ((launch["min_nodes"], launch["max_nodes"], launch["nproc_per_node"]) ==
          (plan["nnodes"], plan["nnodes"], plan["nprocPerNode"]) and launch["rdzv_backend"] == "c10d"
          and launch["rdzv_endpoint"] == plan["rendezvous"]["endpoint"] and launch["run_id"] == plan["rendezvous"]["id"])
    # Where torch puts its logs is its own temporary folder per run: not a fact of the plan.
    parsed["launchConfig"].pop("logs_specs", None)
    if ok:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(parsed, indent=2, sort_keys=True) + "\n")
    print(f"torchrun: torch-{parsed['torch']} nodes={plan['nnodes']} argv={'ok' if ok else 'differs'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
