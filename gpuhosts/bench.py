"""`make bench`: the cost of `gpuhosts plan kpro5` relative to importing its dependencies, in one run.

Both are whole interpreter runs, measured alternately so that machine noise hits both alike; the figure is the
ratio of medians (goal ≤ 2.0: the plan should cost about as much as `import pulumi`). A ratio above the goal
exits 1. Both run as an installed program runs, with Python's bytecode cache: an environment that turns it off
(PYTHONDONTWRITEBYTECODE) would time the compiling of every module instead, on both sides.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import os
import time
from pathlib import Path

ROUNDS = 7
GOAL = 2.0
ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
IMPORTS = [sys.executable, "-c", "import pulumi, paramiko, yaml, jinja2, pydantic"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=ENVIRONMENT)
    return time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        plan = [sys.executable, "-m", "gpuhosts.cli", "plan", "kpro5", "--out", str(Path(scratch) / "kpro5")]
        timed(IMPORTS), timed(plan)  # warm the file cache
        imports, plans = [], []
        for _ in range(ROUNDS):
            imports.append(timed(IMPORTS))
            plans.append(timed(plan))
    base, cost = statistics.median(imports), statistics.median(plans)
    print(f"imports: median {base:.3f}s over {ROUNDS} runs ({min(imports):.3f}–{max(imports):.3f})")
    print(f"plan kpro5: median {cost:.3f}s over {ROUNDS} runs ({min(plans):.3f}–{max(plans):.3f})")
    ratio = cost / base
    print(f"bench: plan/imports = {ratio:.2f} (goal <= {GOAL})")
    if ratio > GOAL:
        print(f"bench: the plan costs {ratio:.2f} times the imports, above the goal of {GOAL}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
