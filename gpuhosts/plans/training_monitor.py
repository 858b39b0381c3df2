"""TrainingMonitor: the web UI of the training (gpuhosts_monitor/, Flask) as a service on the node; it reads the
training's log and checkpoints and asks the hidden-state server for its health, and changes nothing."""

from __future__ import annotations

from pathlib import Path

from gpuhosts.envspec import EnvSpec
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.plans.node_units import service_unit
from gpuhosts.render import HostFile, render
from gpuhosts.training import TrainerStack
from gpuhosts.units import Unit

KEY = "training-monitor"
MONITOR_UNIT = "gpuhosts-training-monitor.service"
MONITOR_TOKEN = "/etc/gpuhosts/monitor.token"
MONITOR_PACKAGE = Path(__file__).resolve().parent.parent.parent / "gpuhosts_monitor"
MONITOR_HEADERS = {".py": "# {}", ".html": "<!-- {} -->", ".css": "/* {} */", ".js": "// {}"}


def monitor_file(app_dir: str, path: Path) -> HostFile:
    """A file of the monitor's package as the node receives it: the repository's file under a managed-by header."""
    relative = path.relative_to(MONITOR_PACKAGE).as_posix()
    header = MONITOR_HEADERS[path.suffix].format(f"managed by gpuhosts — gpuhosts_monitor/{relative} of the gpuhosts "
                                                 "repository; do not edit on the node")
    return HostFile(f"{app_dir}/gpuhosts_monitor/{relative}", header + "\n" + path.read_text())


def plan_training_monitor(stack: TrainerStack, monitor_env: EnvSpec, log: str, server_url: str,
                          needs: tuple[str, ...]) -> Unit:
    training, monitor = stack.training, stack.training.monitor
    app_dir = f"{SERVICE_ROOT}/monitor/app"
    app_files = tuple(monitor_file(app_dir, path) for path in sorted(MONITOR_PACKAGE.rglob("*"))
                      if path.is_file() and path.suffix in MONITOR_HEADERS)
    token_file = MONITOR_TOKEN if monitor.token_secret else None
    argv = [monitor_env.interpreter, "-m", "gpuhosts_monitor", "--log", log, "--checkpoints", stack.checkpoints,
            "--server-url", server_url, "--bind", monitor.bind, "--port", str(monitor.port),
            "--title", f"DFlash training of {training.verifier.repo}"]
    if token_file:
        argv += ["--token-file", token_file]
    unit_file = HostFile(f"/etc/systemd/system/{MONITOR_UNIT}", render(
        "training_monitor/monitor.service.j2", bind=monitor.bind, port=monitor.port, token_file=token_file,
        workdir=app_dir, argv=argv))
    files = [*app_files, unit_file]
    return service_unit(
        KEY, "TrainingMonitor", MONITOR_UNIT, files,
        render("common/node-unit.sh.j2", unit=KEY, unit_name=MONITOR_UNIT,
               summary=f"The monitoring web UI on {monitor.bind}:{monitor.port}.", files=files,
               needs=[monitor_env.interpreter], secret_file=token_file),
        render("common/node-unit-teardown.sh.j2", unit=KEY, unit_name=MONITOR_UNIT,
               keeps="it only reads the training.", remove=[unit_file.path, *(f.path for f in app_files),
                                                          *([token_file] if token_file else [])],
               delete_dirs=[], empty_dirs=["/etc/gpuhosts"]),
        needs, stdin_secret=monitor.token_secret, keeps="it only reads the training: logs and checkpoints untouched")
