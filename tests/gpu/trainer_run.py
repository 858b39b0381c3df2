"""The training node's trainer for real, on one GPU: what the plan renders, run in the order the node runs it.

    python3 tests/gpu/trainer_run.py --bundle build/gpu-trainer --wheels .whl --out OUT [--limit-s 420]

On a machine with a GPU, as root (the plan's paths are the node's: /data, /opt/gpuhosts, /usr/local/lib/gpuhosts),
with the bundle tests/gpu/trainer_bundle.py made (`make gpu-trainer` says how). Steps:

1. the node's layout: the speculators environment (a venv over the machine's torch, with speculators 0.7.0, a
   transformers of 5.x below 5.15 and what else it needs from --wheels; `torchrun` in it), speculators' scripts/
   where the PythonEnv unit checks them out, the plan's host files (the launch script, the checks, the monitor);
2. the small verifier, its tokenizer, the z-lab-shaped drafter and the mix rows (tests/gpu/trainer_models.py);
3. the DrafterConvert unit's own ensure script: z-lab's config checked, `convert_model`, the result checked;
4. speculators' prepare_data.py with the words the DatasetPrepare unit renders (the full set and the smoke run's);
5. the hidden-state stand-in on the server's port (tests/gpu/hidden_state_standin.py, with the machine's
   transformers: the vLLM environment is not speculators');
6. the launch script the plan renders, its output appended to the log as its systemd unit appends it: the
   hidden-state check, the smoke run, then the full run, each the real scripts/train.py under torchrun;
7. the monitor as its unit starts it, asked for its page and /api/status.

OUT receives train.log, checkpoints.txt (every file under the checkpoint directories: size, path), status.json
(the monitor's view), monitor.html, versions.json, checkpoints.tar.gz (the checkpoint directories without weight and
optimizer files, for a screenshot elsewhere) and logs.tar.gz (every step's own output).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC_VENV = Path("/opt/gpuhosts/speculators/venv")
SPEC_SRC = Path("/opt/gpuhosts/speculators/src")
VLLM_PYTHON = Path("/opt/gpuhosts/vllm/venv/bin/python")
MONITOR_PYTHON = Path("/opt/gpuhosts/monitor/venv/bin/python")
WEIGHTS = (".safetensors", ".pt", ".bin", ".pth", ".distcp")


def say(text: str) -> None:
    print(f"== {time.strftime('%H:%M:%S')} {text}", flush=True)


def run(argv: list[str], log: Path, **options) -> None:
    say(" ".join(shlex.quote(str(a)) for a in argv) + f"  (output in {log.name})")
    with open(log, "ab") as out:
        done = subprocess.run([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT, **options)
    if done.returncode != 0:
        sys.stdout.write(log.read_text(errors="replace")[-6000:])
        raise SystemExit(f"{argv[0]} exited {done.returncode}")


def layout(bundle_dir: Path, wheels: Path | None, speculators_venv: str | None, logs: Path) -> None:
    """The environments and files the node's PythonEnv and file units would have put there."""
    if speculators_venv:
        SPEC_VENV.parent.mkdir(parents=True, exist_ok=True)
        SPEC_VENV.unlink(missing_ok=True)
        SPEC_VENV.symlink_to(speculators_venv)
    else:
        # The machine's torch lives in a virtual environment of its own, which --system-site-packages would not
        # reach: a .pth file puts its site-packages after the new environment's, whose packages come first.
        run([sys.executable, "-m", "venv", SPEC_VENV], logs / "venv.log")
        import site
        (SPEC_VENV / f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/machine-torch.pth"
         ).write_text("\n".join(site.getsitepackages()) + "\n")
        run([SPEC_VENV / "bin/python", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
             *sorted(wheels.glob("*.whl"))], logs / "venv.log")
    torchrun = SPEC_VENV / "bin/torchrun"
    torchrun.write_text(f"#!{SPEC_VENV}/bin/python\nimport sys\nfrom torch.distributed.run import main\n"
                        "sys.exit(main())\n")
    torchrun.chmod(0o755)
    shutil.copytree(bundle_dir / "speculators-src", SPEC_SRC, dirs_exist_ok=True)
    # The check needs no package (any Python 3); the monitor needs Flask, which the wheels bring into the
    # speculators environment.
    for python, target in ((VLLM_PYTHON, sys.executable), (MONITOR_PYTHON, SPEC_VENV / "bin/python")):
        python.parent.mkdir(parents=True, exist_ok=True)
        python.unlink(missing_ok=True)
        python.symlink_to(target)
    host = bundle_dir / "plan/hosts/trainer"
    for tree in ("opt/gpuhosts/training", "opt/gpuhosts/monitor/app", "usr/local/lib/gpuhosts"):
        shutil.copytree(host / tree, Path("/") / tree, dirs_exist_ok=True)


def unit_exec(unit_file: Path) -> tuple[list[str], str]:
    """ExecStart and WorkingDirectory of a rendered systemd unit."""
    text = unit_file.read_text().replace("\\\n", " ")
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return shlex.split(lines["ExecStart"]), lines["WorkingDirectory"]


def wait_for(url: str, limit_s: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"{process.args[0]} exited {process.returncode} before {url} answered")
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not answer in {limit_s} s")
        time.sleep(0.5)


def versions(speculators_python: Path) -> dict:
    probe = ("import json, torch, transformers, tokenizers, importlib.metadata as m; print(json.dumps({"
             "'torch': torch.__version__, 'transformers': transformers.__version__, "
             "'tokenizers': tokenizers.__version__, 'speculators': m.version('speculators'), "
             "'cuda': torch.version.cuda, 'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))")
    found = {"speculatorsEnv": json.loads(subprocess.run([str(speculators_python), "-c", probe], check=True,
                                                         capture_output=True, text=True).stdout)}
    import torch
    import transformers
    found["hiddenStateServerEnv"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                                     "transformers": transformers.__version__}
    smi = shutil.which("nvidia-smi")
    if smi:
        found["nvidiaSmi"] = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total",
                                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--wheels", type=Path, help="wheels of the speculators environment (.whl)")
    parser.add_argument("--speculators-venv", help="a virtual environment that already has speculators (instead "
                                                   "of --wheels)")
    parser.add_argument("--text-only", action="store_true", help="trainer_models.py --text-only")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit-s", type=float, default=420, help="cap on the launch script's run")
    args = parser.parse_args()
    bundle_dir = args.bundle.resolve()
    bundle = json.loads((bundle_dir / "bundle.json").read_text())
    out = args.out.resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    say("1. the node's layout")
    layout(bundle_dir, args.wheels and args.wheels.resolve(), args.speculators_venv, logs)
    python = SPEC_VENV / "bin/python"

    say("2. the verifier, its tokenizer, the drafter, the mix")
    run([python, HERE / "trainer_models.py", "--bundle", bundle_dir, *(["--text-only"] if args.text_only else [])],
        logs / "models.log", env=env)

    say("3. DrafterConvert, the unit's ensure script")
    run(["bash", bundle_dir / bundle["convertEnsure"]], logs / "drafter-convert.log", env=env)

    say("4. prepare_data.py as DatasetPrepare calls it")
    for call in bundle["tokenize"]:
        argv = call["argv"]
        part = Path(argv[argv.index("--output") + 1])
        final = Path(call["dir"].replace("$target", bundle["dataset"]["dir"]))
        shutil.rmtree(part, ignore_errors=True)
        run([python, SPEC_SRC / "scripts/prepare_data.py", *argv], logs / "prepare-data.log", env=env)
        shutil.rmtree(final, ignore_errors=True)
        part.rename(final)

    say("5. the hidden-state stand-in")
    port = bundle["serverUrl"].rsplit(":", 1)[1]
    standin = subprocess.Popen(
        [sys.executable, HERE / "hidden_state_standin.py", "--model", bundle["verifier"],
         "--served-model-name", bundle["servedModel"], "--hidden-states-path", bundle["statesDir"],
         "--layers", ",".join(map(str, bundle["serverLayers"])), "--port", port, "--log", logs / "standin.log"],
        stdout=open(logs / "standin.out", "ab"), stderr=subprocess.STDOUT, env=env)
    monitor = None
    try:
        wait_for(f"{bundle['serverUrl']}/health", 300, standin)

        say("6. the launch script, appending to the log as its unit does")
        checkpoints, log = Path(bundle["checkpoints"]), Path(bundle["log"])
        checkpoints.mkdir(parents=True, exist_ok=True)
        # systemd gives a service neither a terminal nor these
        service_env = {k: v for k, v in env.items() if k not in ("PYTHONUNBUFFERED", "TERM", "COLUMNS")}
        started = time.monotonic()
        with open(log, "ab") as append:
            launch = subprocess.Popen(["bash", bundle["launchScript"]], stdout=append, stderr=subprocess.STDOUT,
                                      cwd=checkpoints, env=service_env, start_new_session=True)
            try:
                returncode = launch.wait(timeout=args.limit_s)
            except subprocess.TimeoutExpired:
                # stopped as systemd stops the unit: SIGTERM to the whole group, torchrun ends its workers
                os.killpg(launch.pid, 15)
                returncode = launch.wait(timeout=60)
                say(f"stopped after the {args.limit_s} s cap")
        say(f"launch script exited {returncode} after {time.monotonic() - started:.0f} s")

        say("7. the monitor as its unit starts it")
        command, workdir = unit_exec(bundle_dir / "plan/hosts/trainer" / bundle["monitorUnit"])
        monitor = subprocess.Popen(command, cwd=workdir, stdout=open(logs / "monitor.log", "ab"),
                                   stderr=subprocess.STDOUT, env=env)
        port = command[command.index("--port") + 1]
        wait_for(f"http://127.0.0.1:{port}/healthz", 60, monitor)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as response:
            (out / "status.json").write_bytes(response.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            (out / "monitor.html").write_bytes(response.read())
    finally:
        for process in (monitor, standin):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
        if Path(bundle["log"]).exists():
            say("8. what comes back")
            collect(bundle, out, logs, python)
    print(json.dumps({"launch": returncode, "status": json.loads((out / "status.json").read_text())
                      .get("training")}, indent=1)[:3000])
    return returncode


def collect(bundle: dict, out: Path, logs: Path, python: Path) -> None:
    log, checkpoints = Path(bundle["log"]), Path(bundle["checkpoints"])
    shutil.copy(log, out / "train.log")
    roots = [Path(bundle["smokeCheckpoints"]), checkpoints]
    listing = [f"{p.stat().st_size} {p}" for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    (out / "checkpoints.txt").write_text("\n".join(listing) + "\n")
    with tarfile.open(out / "checkpoints.tar.gz", "w:gz") as tar:
        for root in (r for r in roots if r.exists()):
            tar.add(root, arcname=root.name, filter=lambda i: None if i.name.endswith(WEIGHTS) else i)
    (out / "versions.json").write_text(json.dumps(versions(python), indent=2) + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")
    shutil.rmtree(logs)


if __name__ == "__main__":
    sys.exit(main())
