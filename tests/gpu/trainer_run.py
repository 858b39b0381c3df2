"""The training node's trainer for real, on one GPU: what the plan renders, run in the order the node runs it.

    python3 tests/gpu/trainer_run.py --bundle build/gpu-trainer --wheels .whl --out OUT [--ends normal,killed,interrupted]

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
   hidden-state check, the smoke run (once: its marker stays), then the full run, each the real scripts/train.py
   under torchrun; ended as --ends says (the run to its end, its training worker killed, or the unit stopped),
   then the unit's ExecStopPost as systemd runs it;
7. the monitor as its unit starts it, asked for its page and /api/status.

OUT/<end>/ receives, per launch, train.log, checkpoints.txt (every file under the checkpoint directories: size,
path), status.json (the monitor's view), monitor.html and checkpoints.tar.gz (the checkpoint directories without
weight and optimizer files, for a screenshot elsewhere); OUT/ versions.json and logs.tar.gz (every step's own
output).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
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
    # Wrappers, not links: a link to a virtual environment's python finds no pyvenv.cfg beside itself and runs as
    # the base interpreter, without the environment's packages.
    for python, target in ((VLLM_PYTHON, sys.executable), (MONITOR_PYTHON, SPEC_VENV / "bin/python")):
        python.parent.mkdir(parents=True, exist_ok=True)
        python.unlink(missing_ok=True)
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(str(target))} "$@"\n')
        python.chmod(0o755)
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
    parser.add_argument("--limit-s", type=float, default=480, help="cap on each launch of the script")
    parser.add_argument("--ends", type=lambda s: s.split(","), default=["normal"],
                        help="how each launch ends, in order: normal (the run to its end), killed (the training "
                             "worker SIGKILLed), interrupted (SIGTERM to the unit's processes); e.g. normal,killed")
    parser.add_argument("--smoke-passed", action="store_true",
                        help="write the smoke run's marker first, as on a node whose smoke run passed before: the "
                             "launch goes straight to the full run")
    parser.add_argument("--at-step", type=int, default=6, help="the step a killed or interrupted launch ends at")
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
    results: dict[str, dict] = {}
    try:
        wait_for(f"{bundle['serverUrl']}/health", 300, standin)

        checkpoints, log = Path(bundle["checkpoints"]), Path(bundle["log"])
        if args.smoke_passed:
            smoke_passed(Path(bundle["launchScript"]))
        for end in args.ends:
            say(f"6. the launch script, appending to the log as its unit does (the run is to end {end})")
            ended = out / end
            ended.mkdir(exist_ok=True)
            try:
                returncode = launch_once(bundle, end, env, args.limit_s, args.at_step)
            finally:
                if log.exists():
                    shutil.copy(log, ended / "train.log")
            say(f"7. the monitor as its unit starts it ({end})")
            command, workdir = unit_exec(bundle_dir / "plan/hosts/trainer" / bundle["monitorUnit"])
            monitor = subprocess.Popen(command, cwd=workdir, stdout=open(logs / "monitor.log", "ab"),
                                       stderr=subprocess.STDOUT, env=env)
            port = command[command.index("--port") + 1]
            wait_for(f"http://127.0.0.1:{port}/healthz", 60, monitor)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as response:
                (ended / "status.json").write_bytes(response.read())
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
                (ended / "monitor.html").write_bytes(response.read())
            monitor.terminate()
            monitor.wait(timeout=30)
            monitor = None
            say(f"8. what comes back ({end})")
            collect(bundle, ended, python)
            results[end] = {"launch": returncode,
                            "state": json.loads((ended / "status.json").read_text())["training"]["state"]}
    finally:
        for process in (monitor, standin):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
        (out / "versions.json").write_text(json.dumps(versions(python), indent=2) + "\n")
        with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
            tar.add(logs, arcname="logs")
        shutil.rmtree(logs)
    print(json.dumps(results, indent=1))
    return 0 if all(r["launch"] == EXPECTED_EXIT[end] for end, r in results.items()) else 1


# The launch script's exit as the unit would see it: 0 after a run to its end, torchrun's 1 after a worker died
# (its ChildFailedError) and after a stop (its SignalException).
EXPECTED_EXIT = {"normal": 0, "killed": 1, "interrupted": 1}
CLEAN_SIGNALS = {"HUP", "INT", "TERM", "PIPE"}


def launch_once(bundle: dict, end: str, env: dict, limit_s: float, at_step: int) -> int:
    """One start of the training unit: the launch script with its output appended to the log; for `killed`, the
    training worker SIGKILLed once `at_step` steps are logged (as the kernel's OOM killer would), for
    `interrupted`, SIGTERM to the whole group then (as `systemctl stop` does with KillMode=control-group); then the
    unit's ExecStopPost with the variables systemd gives it (systemd.exec(5): SERVICE_RESULT, EXIT_CODE,
    EXIT_STATUS)."""
    checkpoints, log = Path(bundle["checkpoints"]), Path(bundle["log"])
    # a fresh run: one that found an earlier run's last checkpoint would resume it with nothing left to do
    shutil.rmtree(checkpoints, ignore_errors=True)
    checkpoints.mkdir(parents=True)
    log.unlink(missing_ok=True)
    # systemd gives a service neither a terminal nor these
    service_env = {k: v for k, v in env.items() if k not in ("PYTHONUNBUFFERED", "TERM", "COLUMNS")}
    started = time.monotonic()
    offset = log.stat().st_size if log.exists() else 0
    stopped = False
    with open(log, "ab") as append:
        launch = subprocess.Popen(["bash", bundle["launchScript"]], stdout=append, stderr=subprocess.STDOUT,
                                  cwd=checkpoints, env=service_env, start_new_session=True)
        try:
            if end == "normal":
                returncode = launch.wait(timeout=limit_s)
            else:
                wait_for_steps(log, offset, at_step, launch, limit_s)
                if end == "killed":
                    worker = training_worker(launch.pid)
                    say(f"SIGKILL to the training worker {worker}")
                    os.kill(worker, signal.SIGKILL)
                else:
                    say("SIGTERM to the unit's processes, as systemctl stop sends it (KillMode=control-group)")
                    for pid in [launch.pid, *descendants(launch.pid)]:
                        try:
                            os.kill(pid, signal.SIGTERM)
                        except ProcessLookupError:
                            pass
                    stopped = True
                returncode = launch.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGTERM)
            returncode = launch.wait(timeout=300)
            stopped = True
            say(f"stopped after the {limit_s} s cap")
    say(f"launch script exited {returncode} after {time.monotonic() - started:.0f} s")
    if returncode >= 0:
        result, code, status = ("success" if returncode == 0 else "exit-code"), "exited", str(returncode)
    else:
        name = signal.Signals(-returncode).name.removeprefix("SIG")
        result = "success" if stopped and name in CLEAN_SIGNALS else "signal"
        code, status = "killed", name
    with open(log, "ab") as append:
        subprocess.run(["bash", bundle["launchScript"], "--ended"], stdout=append, stderr=subprocess.STDOUT,
                       env={**service_env, "SERVICE_RESULT": result, "EXIT_CODE": code, "EXIT_STATUS": status},
                       check=True)
    return returncode


def smoke_passed(launch_script: Path) -> None:
    """The marker the launch script writes after its smoke run passed, where it looks for it."""
    words = {}
    for line in launch_script.read_text().splitlines():
        if line.startswith(("smoke_save=", "smoke_key=")):
            name, value = line.split("=", 1)
            words[name] = shlex.split(value)[0]
    marker = Path(words["smoke_save"]) / ".gpuhosts-smoke"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(words["smoke_key"] + "\n")
    say(f"the smoke run's marker {marker}: the launch goes straight to the full run")


def wait_for_steps(log: Path, offset: int, steps: int, launch: subprocess.Popen, limit_s: float) -> None:
    """Until this launch has logged `steps` training records (speculators prints one per step)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with open(log, "rb") as text:
            text.seek(offset)
            if text.read().count(b"train/loss=") >= steps:
                return
        if launch.poll() is not None:
            raise SystemExit(f"the launch script exited {launch.returncode} before step {steps}")
        time.sleep(0.5)
    raise SystemExit(f"no step {steps} in {limit_s} s")


def processes() -> dict[int, tuple[int, list[str]]]:
    """pid: (parent pid, argv) of every process there is."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError, ValueError):
            continue
        found[int(pid)] = (parent, argv)
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: what the unit's control group holds beside it (torchrun starts its workers in
    sessions of their own, so the launch's process group does not reach them; systemd's KillMode=control-group
    does)."""
    table, found, frontier = processes(), [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (ppid, _argv) in table.items() if ppid == parent]
        found += children
        frontier += children
    return found


def training_worker(torchrun: int) -> int:
    """The pid of the training worker torchrun started (not a data loader worker it forked)."""
    for pid, (parent, argv) in processes().items():
        if parent == torchrun and any(word.endswith("scripts/train.py") for word in argv):
            return pid
    raise SystemExit("no training worker under torchrun")


def collect(bundle: dict, out: Path, python: Path) -> None:
    log, checkpoints = Path(bundle["log"]), Path(bundle["checkpoints"])
    shutil.copy(log, out / "train.log")
    roots = [Path(bundle["smokeCheckpoints"]), checkpoints]
    listing = [f"{p.stat().st_size} {p}" for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    (out / "checkpoints.txt").write_text("\n".join(listing) + "\n")
    with tarfile.open(out / "checkpoints.tar.gz", "w:gz") as tar:
        for root in (r for r in roots if r.exists()):
            tar.add(root, arcname=root.name, filter=lambda i: None if i.name.endswith(WEIGHTS) else i)


if __name__ == "__main__":
    sys.exit(main())
