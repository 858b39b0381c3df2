"""`make verify-ddtree`: DDTree's speculative decoding proven lossless on a GDN-hybrid target, on CPU.

1. installs DDTree's locked environment (locks/ddtree/c96427a-py3.12.txt, resolved from locks/ddtree/requirements.in
   by `--lock`) into build/ddtree/<lock name> with a Python 3.12 (`uv pip sync --require-hashes`; skipped when that
   lock is installed there already);
2. makes two trees from the pinned commit's files (tests/fixtures/ddtree/upstream-c96427a): one with
   stacks/patches/ddtree-gdn-hybrid.patch applied by `git apply`, as the checkout unit applies it, and one without;
3. runs tests/verify_ddtree/check_lossless.py in the environment: the patched tree (`fixed`), the patched tree with
   its linear-attention verify taken out (`without-fix`), and the upstream tree (`upstream`);
4. writes tests/fixtures/ddtree/lossless-cpu-fp32.json and ends with the figures:
   `ddtree-lossless: cases=<n> identical=<n> (cpu fp32)` and `without-fix: identical=<n> upstream: identical=<n>`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMMIT = "c96427a185677bf4133ed865dd1626a5041aef9b"
UPSTREAM = ROOT / "tests" / "fixtures" / "ddtree" / f"upstream-{COMMIT[:7]}"
PATCH = ROOT / "stacks" / "patches" / "ddtree-gdn-hybrid.patch"
REQUIREMENTS = ROOT / "locks" / "ddtree" / "requirements.in"
LOCK = ROOT / "locks" / "ddtree" / f"{COMMIT[:7]}-py3.12.txt"
FIXTURE = ROOT / "tests" / "fixtures" / "ddtree" / "lossless-cpu-fp32.json"
ENVS = ROOT / "build" / "ddtree"
PLATFORM = "x86_64-manylinux_2_34"


def resolve(uv: str) -> None:
    """The lock: uv's resolution of requirements.in for Python 3.12 on PLATFORM, with the hashes of the files uv
    selects there (gpuhosts/lock_tool.py `select_hashes`)."""
    sys.path.insert(0, str(ROOT))
    from gpuhosts.lock_tool import select_hashes

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(REQUIREMENTS, work / "requirements.in")
        base = [str(Path(uv).resolve()), "pip", "compile", "--quiet", "requirements.in", "--generate-hashes",
                "--python-version", "3.12", "--python-platform", PLATFORM, "--no-header"]
        subprocess.run([*base, "-o", "lock.txt"], check=True, cwd=work)
        subprocess.run([*base, "--format", "pylock.toml", "-o", "pylock.lock.toml"], check=True, cwd=work)
        body = select_hashes((work / "lock.txt").read_text(), (work / "pylock.lock.toml").read_text())
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    LOCK.write_text("# managed by gpuhosts: `python tests/verify_ddtree/run.py --lock` writes this file; do not edit.\n"
                    f"# requirements: locks/ddtree/requirements.in (sha256 {digest})\n"
                    f"# python: 3.12\n# platform: {PLATFORM}\n" + body)
    print(f"lock: {LOCK.relative_to(ROOT)} ({LOCK.stat().st_size // 1024} KiB)")


def install(python: str, uv: str) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "verify_engines"))
    import run as engines  # tests/verify_engines/run.py, not this file: its folder is searched first now

    return engines.sync_lock(LOCK, ENVS / LOCK.stem, python, uv)


def tree(where: Path, patched: bool) -> Path:
    shutil.copytree(UPSTREAM, where)
    if patched:
        # Its own repository, so that `git apply` reads paths from this tree's root, as in the checkout unit.
        subprocess.run(["git", "init", "--quiet"], cwd=where, check=True)
        subprocess.run(["git", "apply", str(PATCH)], cwd=where, check=True)
    return where


def check(venv: Path, where: Path, mode: str) -> dict:
    done = subprocess.run([str(venv / "bin" / "python"), str(HERE / "check_lossless.py"), "--mode", mode],
                          cwd=where, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("LOSSLESS ")]
    if len(lines) != 1:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"check_lossless.py --mode {mode} printed no result (status {done.returncode}): {tail}")
    return json.loads(lines[0].removeprefix("LOSSLESS "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="a Python 3.12 for the environment")
    parser.add_argument("--uv", default=str(ROOT / ".tools" / "bin" / "uv"))
    parser.add_argument("--lock", action="store_true", help="resolve locks/ddtree/ from requirements.in and exit")
    args = parser.parse_args(argv)
    if args.lock:
        resolve(args.uv)
        return 0
    if not args.python:
        parser.error("--python is needed")
    venv = install(args.python, args.uv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        patched = tree(Path(tmp) / "patched", True)
        upstream = tree(Path(tmp) / "upstream", False)
        for mode, where in (("fixed", patched), ("without-fix", patched), ("upstream", upstream)):
            results[mode] = check(venv, where, mode)
            print(f"{mode}: cases={results[mode]['cases']} identical={results[mode]['identical']}", flush=True)
    FIXTURE.write_text(json.dumps({"made_by": "make verify-ddtree (tests/verify_ddtree/run.py)",
                                   "lock": str(LOCK.relative_to(ROOT)), **results}, indent=1) + "\n")
    fixed = results["fixed"]
    print(f"ddtree-lossless: cases={fixed['cases']} identical={fixed['identical']} (cpu fp32)")
    print(f"without-fix: identical={results['without-fix']['identical']} "
          f"upstream: identical={results['upstream']['identical']}")
    return 0 if fixed["identical"] == fixed["cases"] and fixed["greedy_cached_identical"] == fixed["prompts"] else 1


if __name__ == "__main__":
    sys.exit(main())
