"""`python tests/verify_gateway/run.py [PYTHON]`: install the gateway's locked environment (locks/smg-*.txt) into
build/gateway/ and parse the gateway command line the replica stack renders with smg's own launcher; write the
result to tests/fixtures/gateway/smg-<version>.json, which the quick tier reads (tests/test_gateway_unit.py).

The lock is resolved for Python 3.12; with another interpreter its pins are installed without their hashes (the
wheels' hashes are per Python), which this says in its output and in the fixture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests")]

from gpuhosts.locks import locked_pins, lock_text  # noqa: E402
from gpuhosts.plans.gateway import gateway_env, router_flags  # noqa: E402
from replicas_data import replica_stack  # noqa: E402

UV = PROJECT / ".tools" / "bin" / "uv"


def install_env(python: str = sys.executable) -> tuple[Path, str]:
    """The gateway's locked environment in build/gateway/smg-<version>, on `python`; (the venv, how it was
    installed). Installing what is installed changes nothing, so a second call only audits it."""
    env = gateway_env(replica_stack().services[0])
    lock = lock_text(env.lock)
    venv = PROJECT / "build" / "gateway" / f"smg-{env.release}"
    subprocess.run([str(UV), "venv", "--quiet", "--allow-existing", "--python", python, str(venv)], check=True)
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    if version == env.python:
        lock_path = venv / "requirements.lock"
        lock_path.write_text(lock)
        install = ["pip", "sync", "--require-hashes", str(lock_path)]
        how = f"uv pip sync --require-hashes {env.lock.path().name}"
    else:
        install = ["pip", "install", *locked_pins(lock)]
        how = f"the pins of {env.lock.path().name} without hashes, on Python {version}"
    subprocess.run([str(UV), *install, "--quiet", "--python", str(venv / "bin" / "python")], check=True)
    return venv, how


def site_packages(venv: Path) -> Path:
    """Where the venv's distributions are (one lib/pythonX.Y)."""
    (site,) = venv.glob("lib/python*/site-packages")
    return site


def main(argv: list[str]) -> int:
    python = argv[0] if argv else sys.executable
    service = replica_stack().services[0]
    env = gateway_env(service)
    venv, how = install_env(python)
    print(f"gateway: installed {how}")
    flags = router_flags(service)
    out = subprocess.run([str(venv / "bin" / "python"), str(HERE / "check_smg.py"), json.dumps(flags)],
                         check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    result = json.loads(out)
    fixture = {"source": f"smg {env.release} wheel from PyPI, installed from {how}; parsed by smg/launch_router.py "
                         "parse_router_args (tests/verify_gateway/check_smg.py)",
               "flags": flags, **result}
    path = PROJECT / "tests" / "fixtures" / "gateway" / f"smg-{env.release}.json"
    path.write_text(json.dumps(fixture, indent=2, sort_keys=True) + "\n")
    print(f"gateway: {result['version']} argv=ok workers={len(result['parsed']['worker_urls'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
