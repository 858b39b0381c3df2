"""`make bench`: the cost of `gpuhosts plan kpro5` relative to importing its dependencies, in one run.

Both are whole interpreter runs, measured alternately so that machine noise hits both alike; the figure is the
ratio of medians (target ≤ 2.0: the plan should cost about as much as `import pulumi`).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 7
IMPORTS = [sys.executable, "-c", "import pulumi, paramiko, yaml, jinja2, pydantic"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
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
    print(f"bench: plan/imports = {cost / base:.2f} (target <= 2.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
