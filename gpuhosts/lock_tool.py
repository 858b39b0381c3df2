"""`make locks`: resolve the lock of every environment the committed stacks need, and of the newest releases the
compatibility data names, into locks/ (gpuhosts/locks.py reads them)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.utils import canonicalize_name

from gpuhosts.compat import load_rules
from gpuhosts.locks import LOCKS_DIR, PLATFORM, LockError, LockSpec, _read, collecting, header_problem, lock_spec
from gpuhosts.plan import load_stack, read_stack_file, stand_in_secrets
from gpuhosts.render import PROJECT_ROOT
from gpuhosts.services import ROUTER, ROUTER_VERSION


# --- what the committed stacks need --------------------------------------------------------------------------------

def stack_files(project_root: Path = PROJECT_ROOT) -> list[Path]:
    return sorted((project_root / "stacks").glob("Pulumi.*.yaml"))


def stack_locks(stack_file: Path) -> list[LockSpec]:
    """Every lock the plan of `stack_file` asks for, in plan order."""
    other: list[str] = []
    values, secure, _warnings = stand_in_secrets(*read_stack_file(stack_file, other))
    with collecting() as found:
        load_stack(values, secure, other)
    return found


def newest_locks(specs: list[LockSpec]) -> list[LockSpec]:
    """The newest releases of compat-rules.yaml (`newest`), for each package and Python the stacks lock."""
    newest = load_rules().newest
    out = []
    for spec in specs:
        version = newest.get(spec.package)
        if version and version != spec.version:
            candidate = spec.with_version(version)
            if candidate not in out and candidate not in specs:
                out.append(candidate)
    return out


def needed_locks(project_root: Path = PROJECT_ROOT) -> list[LockSpec]:
    """The locks of every committed stack, then those of the newest releases, then the default gateway's (a
    service may add a gateway without naming its release)."""
    specs: list[LockSpec] = []
    for path in stack_files(project_root):
        specs += [s for s in stack_locks(path) if s not in specs]
    specs += newest_locks(specs)
    router = lock_spec(f"{ROUTER}=={ROUTER_VERSION}", "3.12")
    return specs + ([router] if router not in specs else [])


# --- writing locks ---------------------------------------------------------------------------------------------

def _hash_lines(line: str) -> bool:
    return line.strip().startswith("--hash=")


def select_hashes(requirements_txt: str, pylock: str) -> str:
    """uv's requirements.txt with, per package, only the hashes of the distributions uv's pylock.toml (the same
    resolution) selects for the platform; refused when the two resolutions differ."""
    selected: dict[str, set[str]] = {}
    for package in tomllib.loads(pylock).get("packages", []):
        key = f"{canonicalize_name(package['name'])}=={package['version']}"
        dists = list(package.get("wheels", [])) + ([package["sdist"]] if "sdist" in package else [])
        selected[key] = {d["hashes"]["sha256"] for d in dists}
    out, current, seen = [], None, set()
    for line in requirements_txt.splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if pin:
            current = f"{canonicalize_name(pin[1])}=={pin[2]}"
            if current not in selected:
                raise LockError(f"uv's requirements.txt pins {current}, which its pylock.toml does not")
            seen.add(current)
            out.append(line)
        elif _hash_lines(line):
            digest = line.strip().removeprefix("--hash=sha256:").rstrip(" \\")
            if digest in selected[current]:
                out.append(line)
        else:
            out.append(line)
    for pin in seen:
        if not selected[pin]:
            raise LockError(f"uv's pylock.toml names no distribution of {pin} for {PLATFORM}")
    if seen != set(selected):
        raise LockError(f"uv's two resolutions differ: {sorted(set(selected) ^ seen)}")
    # A pin's last kept hash ends the requirement: no continuation backslash after it.
    text = "\n".join(out) + "\n"
    return re.sub(r" \\\n(?!\s*--hash=)", "\n", text)


def compile_lock(spec: LockSpec, uv: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text(spec.requirement + "\n")
        (work / "constraints.txt").write_text("".join(c + "\n" for c in spec.constraints))
        # Relative names, so that the annotations (`# via -r requirements.in`) do not name a temporary folder.
        base = [str(Path(uv).resolve()), "pip", "compile", "--quiet", "requirements.in", "-c", "constraints.txt",
                "--generate-hashes", "--python-version", spec.python, "--python-platform", PLATFORM, "--no-header"]
        subprocess.run([*base, "-o", "lock.txt"], check=True, cwd=work)
        subprocess.run([*base, "--format", "pylock.toml", "-o", "pylock.lock.toml"], check=True, cwd=work)
        body = select_hashes((work / "lock.txt").read_text(), (work / "pylock.lock.toml").read_text())
    return spec.header() + body


def write_locks(specs: list[LockSpec], uv: str, locks_dir: Path = LOCKS_DIR, jobs: int = 4) -> list[Path]:
    locks_dir.mkdir(parents=True, exist_ok=True)

    def one(spec: LockSpec) -> Path:
        path = spec.path(locks_dir)
        path.write_text(compile_lock(spec, uv))
        print(f"locks: {path.relative_to(locks_dir.parent)} ({path.stat().st_size // 1024} KiB)", flush=True)
        return path

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        written = list(pool.map(one, specs))
    _read.cache_clear()
    return written


def prune(keep: list[LockSpec], locks_dir: Path = LOCKS_DIR) -> None:
    names = {spec.path(locks_dir).name for spec in keep}
    for stale in sorted(locks_dir.glob("*.txt")):
        if stale.name not in names:
            print(f"locks: removing {stale.name} (no stack and no newest release needs it)")
            stale.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuhosts.lock_tool", description=__doc__.split("\n\n")[0])
    parser.add_argument("--uv", default=str(PROJECT_ROOT / ".tools/bin/uv"), help="the uv that resolves")
    parser.add_argument("--list", action="store_true", help="print the locks the stacks need and exit")
    parser.add_argument("--missing", action="store_true", help="write only the locks that are missing or stale")
    args = parser.parse_args(argv)
    specs = needed_locks()
    if args.list:
        for spec in specs:
            print(f"{spec.path().relative_to(PROJECT_ROOT)}  {spec.requirement}  python {spec.python}  "
                  f"constraints: {', '.join(spec.constraints) or 'none'}")
        return 0
    todo = specs
    if args.missing:
        todo = [s for s in specs if _read(s.path()) is None or header_problem(s, _read(s.path()))]
    write_locks(todo, args.uv)
    prune(specs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
