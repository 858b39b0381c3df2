"""Inference engines that a container's units really run, with the host setting ``serve_engines`` on.

``systemctl start`` of a long-running unit inside a container then spawns its ExecStart as systemd would: the
unit's environment applied, in a session of its own, output appended to the container's
``var/log/fakehost/<unit>.log``. A small supervisor (``python3 -m fakehost.engines supervise``) stands in for
systemd's side: it waits for the process, records how it ended and restarts it as ``Restart=`` says. Its pid (the
process group) and start time are in the container's ``run/fakehost/engines/<unit>.pid``, so a container's stop,
which empties its ``run/``, first ends its engines.

The engines themselves: the SGLang launcher gpuhosts installs runs for real on the venv's python, which finds the
stand-in module ``sglang.launch_server`` in ``engine_modules/`` (only when the venv has sglang); ``vllm serve`` is
the venv's ``vllm`` stand-in. Both parse their flags here and serve ``engine_standin.Engine.from_flags``.

Test knobs (host settings): ``serve_engines: true``; ``engine_behaviour: {name: {...}}`` keyed by the unit name
(``gpuhosts-qwen-sglang.service``) or the service name (``qwen-sglang``), with ``acceptance_length`` and
``acceptance_rate`` (SGLang's gauges), ``accept_rate`` (vLLM's per draft token), ``tokens`` (per streamed reply),
``token_delay`` (seconds per token), ``long_context_slowdown`` (decode at 120000 prompt tokens runs that much
slower) and ``fail``: ``"health"`` (``/health`` answers 503) or ``"start"`` (exits 1 at once); ``virtual_clock``
(program file names run on a clock that sleeping moves on, fakehost.pytools), under which a start returns once the
engine listens.
"""
import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import PKG, host_env, kernel
from .programs import map_program
from .util import Fail, container, ct_seen_devices, root, settings, tree, unprefix, write

STATE = "run/fakehost/engines"
LOGS = "var/log/fakehost"
ENGINE_MODULES = PKG / "engine_modules"
STOP_DEADLINE_S = 20.0
# systemd.service(5) RestartSec= default (100ms); systemd 252 src/core/service.c service_init takes
# manager defaults.restart_usec = DEFAULT_RESTART_USEC.
DEFAULT_RESTART_S = 0.1


def __getattr__(name):
    # The engine stand-in, and the HTTP server under it, load only where an engine is served: every other
    # stand-in command imports this module (through pve) on each call, and would pay ~17 ms for them.
    if name in ("Engine", "handler_for"):
        import engine_standin
        return getattr(engine_standin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def serving(t=None) -> bool:
    return bool(settings(t).get("serve_engines"))


def behaviour(name: str, t=None) -> dict:
    table = settings(t).get("engine_behaviour") or {}
    service = name.removesuffix(".service").removeprefix("gpuhosts-")
    return dict(table.get(name) or table.get(service) or {})


# ---- processes --------------------------------------------------------------------------------------------

def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22): a pid reused later has another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def group_members(pgid: int) -> list:
    """Live (not zombie) processes of process group ``pgid``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(d.name))
    return out


def pid_file(r, name) -> Path:
    return r / STATE / f"{name}.pid"


def result_file(r, name) -> Path:
    return r / STATE / f"{name}.result"


def recorded(r, name):
    """(pgid, start time) of the unit's supervisor, or None."""
    p = pid_file(r, name)
    if not p.is_file():
        return None
    pgid, started = p.read_text().split()
    return int(pgid), started


def alive(r, name) -> bool:
    rec = recorded(r, name)
    return bool(rec) and start_time(rec[0]) == rec[1] and bool(group_members(rec[0]))


def tracked(r, name) -> bool:
    return pid_file(r, name).is_file()


def state(r, name) -> tuple:
    """(ActiveState, SubState, Result) as systemd 252 reports a Type=simple service's main process
    (src/core/service.c state_translation_table: SERVICE_RUNNING active, SERVICE_AUTO_RESTART activating,
    SERVICE_FAILED failed; service_enter_dead records the exit code as Result=exit-code)."""
    result = result_file(r, name).read_text().split() if result_file(r, name).is_file() else []
    if alive(r, name):
        if result[:1] == ["auto-restart"]:
            return "activating", "auto-restart", "exit-code"
        return "active", "running", "success"
    if result and result[-1] != "0":
        return "failed", "failed", "exit-code"
    return "inactive", "dead", "success"


def restart_wanted(policy: str, rc: int) -> bool:
    """systemd.service(5) Restart= (systemd 252): on-failure restarts after an unclean exit code or signal,
    on-abnormal/on-abort after a signal only; a SIGTERM (a stop) is a clean exit (SuccessExitStatus=)."""
    if rc == 0 or rc == -signal.SIGTERM:
        return policy == "always"
    if policy in ("always", "on-failure"):
        return True
    return policy in ("on-abnormal", "on-abort") and rc < 0


def listening_file(r, name) -> Path:
    return r / STATE / f"{name}.listening"


# A cap that reports a hang, never a verdict.
LISTEN_CAP_S = 600.0


def wait_listening(r, name, supervisor) -> None:
    """Until the engine listens or has ended: under a virtual clock a readiness wait runs out in no time, so the
    start returns only once the engine can answer, as a unit that notifies systemd of its readiness would."""
    waited = 0.0
    while not listening_file(r, name).exists() and not result_file(r, name).exists() and supervisor.poll() is None:
        if waited > LISTEN_CAP_S:
            raise Fail(f"fakehost: {name} neither listened nor ended within {LISTEN_CAP_S:g} s", 1)
        time.sleep(0.02)
        waited += 0.02


def spawn(r, name, unit: dict, argv: list, env: dict) -> None:
    """Run ExecStart's words (container paths, resolved under ``r`` as ``pct exec`` resolves them) under a
    supervisor in a new session, as systemd forks a service's main process."""

    def inside(a):
        return str(r / a.lstrip("/")) if a.startswith("/") and (r / a.lstrip("/")).exists() else a
    words = [map_program(r, argv[0]), *map(inside, argv[1:])]
    e = host_env(tree(), **env)
    e["GPUHOSTS_HOST_ROOT"] = str(r)
    e["FAKEHOST_TREE"] = str(tree())
    e["FAKEHOST_UNIT"] = name
    if env.get("FAKEHOST_CONTAINER") or container():
        e["FAKEHOST_CONTAINER"] = env.get("FAKEHOST_CONTAINER") or container()
    e.pop("GPUHOSTS_SYSFS_HOOK", None)
    wd = unit.get("Service.WorkingDirectory", [""])[-1].lstrip("-")
    cwd = r / wd.lstrip("/") if wd.startswith("/") and (r / wd.lstrip("/")).is_dir() else r
    policy = unit.get("Service.Restart", ["no"])[-1]
    delay = unit.get("Service.RestartSec", [""])[-1]
    log = r / LOGS / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (r / STATE).mkdir(parents=True, exist_ok=True)
    result_file(r, name).unlink(missing_ok=True)
    listening_file(r, name).unlink(missing_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fakehost.engines", "supervise", str(r), name, policy,
                                 delay or str(DEFAULT_RESTART_S), "--", *words], env=e, cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    started = None
    while started is None and proc.poll() is None:  # /proc/PID/stat exists as soon as fork returns
        started = start_time(proc.pid)
    write(pid_file(r, name), f"{proc.pid} {started or 0}\n")
    if settings().get("virtual_clock"):
        wait_listening(r, name, proc)


def supervise(argv) -> int:
    """``supervise ROOT UNIT RESTART RESTARTSEC -- WORDS…``: run WORDS, record the exit, restart by policy."""
    r, name, policy, delay = Path(argv[0]), argv[1], argv[2], float(argv[3].rstrip("s") or 0)
    words = argv[argv.index("--") + 1:]
    stopping, waiting = [], []

    def on_term(signum, frame):
        # the stop signals the whole group, the engine too: forwarding would signal it twice
        stopping.append(signum)
        if waiting:
            raise SystemExit(0)  # a stop during RestartSec= ends the wait (a sleep would resume after the signal)
    signal.signal(signal.SIGTERM, on_term)
    while True:
        child = subprocess.Popen(words)
        rc = child.wait()
        release_holds(r, child.pid)
        if stopping:
            return 0
        again = restart_wanted(policy, rc)
        write(result_file(r, name), f"{'auto-restart ' if again else ''}{rc}\n")
        if not again:
            return 0
        # RestartSec= passes in systemd's timer; here the supervisor waits it out (a stop ends the wait).
        waiting.append(True)
        time.sleep(delay)
        waiting.clear()
        if stopping:
            return 0
        result_file(r, name).unlink(missing_ok=True)


def release_holds(r, pid):
    t = tree()
    if any(h["pid"] == pid for h in kernel.kstate(t)["holders"]):
        kernel.release(t, pid=pid)


def stop(r, name) -> None:
    """``systemctl stop``: SIGTERM to the process group (KillMode=control-group), then wait until every process
    of it is gone (SIGKILL past the deadline, as TimeoutStopSec= would); the unit ends inactive."""
    rec = recorded(r, name)
    if rec and start_time(rec[0]) == rec[1]:
        pgid = rec[0]
        for sig, deadline in ((signal.SIGTERM, STOP_DEADLINE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + deadline
            while group_members(pgid) and time.monotonic() < end:
                time.sleep(0.01)
            if not group_members(pgid):
                break
        if group_members(pgid):
            raise Fail(f"fakehost: processes of {name} outlived SIGKILL: {group_members(pgid)}")
    pid_file(r, name).unlink(missing_ok=True)
    result_file(r, name).unlink(missing_ok=True)


def stop_container(croot) -> None:
    """Every engine of the container ends with it (its processes go when it stops)."""
    d = Path(croot) / STATE
    for p in sorted(d.glob("*.pid")) if d.is_dir() else []:
        stop(Path(croot), p.name.removesuffix(".pid"))


def stop_all(t) -> None:
    """Ends every engine the host tree ``t`` started: in its own ``run/`` and in each container's. For tests."""
    t = Path(t)
    for croot in [t, *sorted((t / "var/lib/lxc").glob("*/rootfs"))]:
        stop_container(croot)


# ---- GPUs -------------------------------------------------------------------------------------------------

def container_gpus(t, vmid) -> list:
    """The container's GPU nodes (``/dev/nvidia<minor>`` it was given at start) in PCI bus order, which is the
    order CUDA counts them in with CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    by_minor = {m: a for a, m in kernel.nv_gpus(t)}
    nodes = []
    for path, rdev in ct_seen_devices(t, vmid):
        minor = rdev.split(":")[-1]
        if path.removeprefix("/dev/nvidia").isdigit() and int(minor) in by_minor:
            nodes.append((by_minor[int(minor)], path))
    return [n for _, n in sorted(nodes)]


def take_gpus(kind: str, mem_fraction: float | None) -> list:
    """Hold the GPUs CUDA_VISIBLE_DEVICES selects for as long as this process runs; fail at start as the engine
    does when another process already computes on one of them."""
    t, vmid = tree(), container()
    gpus = container_gpus(t, vmid) if vmid else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        picked = [int(i) for i in visible.split(",") if i.strip()]
        if any(i >= len(gpus) for i in picked):
            raise Fail("RuntimeError: CUDA error: invalid device ordinal", 1)
        gpus = [gpus[i] for i in picked]
    if not gpus:
        raise Fail("RuntimeError: No CUDA GPUs are available", 1)
    busy = [h for h in kernel.kstate(t)["holders"] if h["compute"] and h["node"] in gpus and h["pid"] != os.getpid()]
    if busy:
        index = gpus.index(busy[0]["node"])
        if kind == "vllm":
            # vllm 0.26.0 v1/worker/utils.py request_memory (from v1/worker/gpu_worker.py Worker.init_device);
            # another process's context leaves under a tenth of the memory free.
            util = mem_fraction or 0.92  # config/cache.py CacheConfig.gpu_memory_utilization default
            total = 47.99
            raise Fail(f"ValueError: Free memory on device cuda:{index} (4.43/{total} GiB) on startup is less than "
                       f"desired GPU memory utilization ({util}, {round(total * util, 2)} GiB). Decrease GPU "
                       "memory utilization or reduce GPU memory used by other processes.", 1)
        # sglang 0.5.11 srt/model_executor/pool_configurator.py MemoryPoolConfig.__post_init__
        raise Fail("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
                   + (f" Current value: mem_fraction_static={mem_fraction}" if mem_fraction else ""), 1)
    for node in gpus:
        kernel.hold(t, node, "vllm" if kind == "vllm" else "python3", compute=True, pid=os.getpid(), container=vmid)
    return gpus


# ---- the engines' command lines ---------------------------------------------------------------------------

def sglang_parser() -> argparse.ArgumentParser:
    """The flags of sglang 0.5.11 srt/server_args.py ServerArgs.add_cli_args that change what the stand-in
    answers (defaults as there: host 127.0.0.1, port 30000, served name = model path)."""
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--context-length", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--reasoning-parser")
    p.add_argument("--tool-call-parser")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--api-key")
    p.add_argument("--admin-api-key")
    return p


def vllm_parser() -> argparse.ArgumentParser:
    """The flags of `vllm serve` (vllm 0.26.0 entrypoints/openai/cli_args.py FrontendArgs, engine/arg_utils.py
    EngineArgs.add_cli_args) that change what the stand-in answers (host None: every address, port 8000, served
    name = the model tag)."""
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("model_tag")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--reasoning-parser")
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--tool-call-parser")
    p.add_argument("--speculative-config")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--api-key", nargs="+")
    return p


def serve(kind: str, argv: list) -> int:
    """The engine process: parse its flags, take its GPUs, serve until SIGTERM."""
    from http.server import ThreadingHTTPServer

    from engine_standin import Engine, handler_for

    unit = os.environ.get("FAKEHOST_UNIT", "")
    b = behaviour(unit) if unit else {}
    if b.get("fail") == "start":
        raise Fail(f"fakehost: {unit} set to fail at start (engine_behaviour)", 1)
    args, _unmodelled = (sglang_parser() if kind == "sglang" else vllm_parser()).parse_known_args(argv)
    if kind == "sglang":
        model = unprefix(args.model_path, root())
        args.served_model_name = [args.served_model_name or model]
        key, mem, host = args.api_key, args.mem_fraction_static, args.host
    else:
        if args.enable_auto_tool_choice and not args.tool_call_parser:
            # vllm 0.26.0 entrypoints/openai/cli_args.py validate_parsed_serve_args
            raise Fail("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser", 1)
        args.context_length = args.max_model_len
        args.served_model_name = args.served_model_name or [unprefix(args.model_tag, root())]
        # vllm 0.26.0 entrypoints/openai/api_server.py build_app: --api-key first, else VLLM_API_KEY
        keys = [k for k in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if k]
        key, mem, host = (keys[0] if keys else None), args.gpu_memory_utilization, args.host or "0.0.0.0"
    take_gpus(kind, mem)

    def on_term(signum, frame):
        # once: a second signal must not cut short the release of the GPUs below
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, on_term)
    try:
        engine = Engine.from_flags(kind, args, key, b)
        engine.admin_key = getattr(args, "admin_api_key", None)
        server = ThreadingHTTPServer((host, args.port), handler_for(engine))
        print(f"fakehost {kind}: serving {engine.model} on {host}:{args.port}", flush=True)
        if unit:
            write(listening_file(root(), unit), f"{host}:{args.port}\n")
        server.serve_forever()
    finally:
        if unit:
            listening_file(root(), unit).unlink(missing_ok=True)
        release_holds(None, os.getpid())
    return 0


def main(argv) -> int:
    if argv[:1] == ["supervise"]:
        return supervise(argv[1:])
    if argv[:1] in (["sglang"], ["vllm"]):
        return serve(argv[0], argv[1:])
    raise Fail("usage: python3 -m fakehost.engines supervise ROOT UNIT RESTART SEC -- WORDS… | sglang|vllm FLAGS…", 2)


if __name__ == "__main__":
    from .util import run_main
    sys.exit(run_main(main))
