"""The Flask application: one page, /api/status with every number the page shows, /metrics with them for
Prometheus, /healthz."""

from __future__ import annotations

import hmac
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from flask import Flask, Response, g, jsonify, render_template, request

from gpuhosts_monitor.metrics import CONTENT_TYPE, exposition
from gpuhosts_monitor.parse import Failure, Interruption, Snapshot, downsample
from gpuhosts_monitor.sources import Cached, LogFollower, newest_checkpoint, query_gpus, server_health

CURVE_POINTS = 500

# The stall rule. A run is stalled when no new step has reached the log for longer than
#     max(STALL_FLOOR_S, STALL_FACTOR × the median interval between logged steps of the current launch).
# The median, not the mean, so that the long gaps a healthy run has anyway (the epoch-end validation, a checkpoint
# save, the first step's compilation) do not raise the threshold. Ten intervals: step times jitter with data loading,
# garbage collection and NCCL, and a mid-epoch checkpoint save costs a few to tens of steps, so a healthy run rarely
# goes ten median intervals without a step, while a hung one (a dead rank, a wedged collective) is called out within
# minutes at the usual 1–10 s per step. The floor covers sub-second steps, whose interval rich's whole-second
# timestamps cannot measure, and runs whose log has no interval to measure yet.
STALL_FLOOR_S = 120.0
STALL_FACTOR = 10.0


@dataclass(frozen=True)
class MonitorConfig:
    """What the monitor watches and how it serves; built from the command line (cli.config_from_args)."""

    log: Path
    checkpoints: Path
    server_url: str
    bind: str = "127.0.0.1"
    port: int = 8686
    token: str | None = None
    """Every request must present it; never logged, never part of a response."""
    nvidia_smi: str = "nvidia-smi"
    total_steps: int | None = None
    """Overrides what the log tells about the length of the run."""
    title: str = "Drafter training"
    cache_s: float = 2.0
    allowed_hosts: tuple[str, ...] = ()
    """Names besides the loopback ones and the bind address that a request's Host may carry when no token is set."""
    """How long nvidia-smi and health readings are reused between requests."""
    health_timeout_s: float = 2.0


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity; a diverged loss is reported as null rather than breaking the page."""
    if value is None or not math.isfinite(value):
        return None
    return value


def stall_threshold(snap: Snapshot) -> tuple[float, float | None, str | None]:
    """(seconds without a new step after which the run is stalled, the median step interval, where it came from)."""
    interval, source = snap.step_interval()
    threshold = max(STALL_FLOOR_S, STALL_FACTOR * interval) if interval is not None else STALL_FLOOR_S
    return threshold, interval, source


def acceptance_status(snap: Snapshot) -> dict:
    figures = snap.acceptance()
    return {
        "step": snap.latest.step if snap.latest and not figures.empty else None,
        "eal": _finite(figures.eal),
        "full_acc": _finite(figures.full_acc),
        "positions": [{"position": pos, "acc": _finite(acc)} for pos, acc in figures.positions],
    }


# what the page says of each stage of an interrupt save (parse.Interruption.save)
SAVE_SUMMARY = {
    "pending": "no checkpoint save logged",
    "saving": "saving a checkpoint",
    "saved": "checkpoint saved to {checkpoint}",
    "failed": "the checkpoint save failed",
    "timed-out": "the checkpoint save timed out",
}


def interruption_status(interruption: Interruption | None) -> dict | None:
    if interruption is None:
        return None
    after = f"after step {interruption.step}" if interruption.step is not None else "before the first step"
    summary = f"{interruption.signal} {after}; " + SAVE_SUMMARY[interruption.save].format(**asdict(interruption))
    return {**asdict(interruption), "summary": summary}


def failure_status(failure: Failure | None) -> dict | None:
    if failure is None:
        return None
    at = f"at step {failure.step}" if failure.step is not None else "before the first step"
    who = f"rank {failure.rank} " if failure.rank is not None else ""
    summary = f"{who}died {at}, exit code {failure.exitcode}" + (f": {failure.reason}" if failure.reason else "")
    return {**asdict(failure), "summary": summary}


def training_status(snap: Snapshot, config: MonitorConfig, log_stat, now: float) -> dict:
    latest = snap.latest
    total, total_source = (config.total_steps, "cli") if config.total_steps else (snap.total_steps(), "log")
    if total is None:
        total_source = None
    rate, rate_source = snap.step_rate()
    step = latest.step if latest else None
    log_age = round(now - log_stat.st_mtime, 1) if log_stat is not None else None
    threshold, interval, interval_source = stall_threshold(snap)
    step_age = max(0.0, now - snap.step_seen_at) if latest and snap.step_seen_at is not None else None
    if log_stat is None:
        state = "no-log"
    elif snap.failure is not None:
        state = "failed"
    elif snap.interruption is not None:
        # before the stall rule: a launch that saved its checkpoint and ended logs no step again, and that is not
        # a hang
        state = "interrupted"
    elif snap.finished:
        state = "finished"
    elif latest is None:
        state = "waiting"
    elif step_age is not None and step_age > threshold:
        state = "stalled"
    else:
        state = "running"
    eta = None
    # a stalled or interrupted run has no time of arrival: the step rate it had says nothing about when it moves
    # again
    if state == "finished":
        eta = 0
    elif state not in ("stalled", "interrupted", "failed") and total is not None and step is not None and rate:
        eta = round(max(0, total - step) / rate)
    return {
        "state": state,
        "step": step,
        "total_steps": total,
        "total_steps_source": total_source,
        # a run that ended normally is done, though its last logged step need not be its last step
        "progress": 1.0 if state == "finished" else (
            round(min(1.0, step / total), 4) if total and step is not None else None),
        # as the trainer counts them in its own lines ("Training epoch 3/3"), else as its records carry them
        "epoch": snap.epoch_number if snap.epoch_number is not None else (latest.epoch if latest else None),
        "epoch_logged": latest.epoch if latest else None,
        "epochs_total": snap.epochs_total,
        "steps_per_epoch": snap.steps_per_epoch,
        "loss": _finite(latest.loss) if latest else None,
        "loss_finite": math.isfinite(latest.loss) if latest and latest.loss is not None else None,
        "lr": _finite(latest.lr) if latest else None,
        "tokens_per_s": _finite(latest.tokens_per_s) if latest else None,
        "steps_per_s": round(rate, 6) if rate else None,
        "rate_source": rate_source,
        "eta_s": eta,
        "metrics": {key: _finite(value) for key, value in snap.metrics.items()},
        "validation": {
            "step": snap.val_step,
            "metrics": {key: _finite(value) for key, value in snap.val.items()},
        },
        "restarts": [asdict(restart) for restart in snap.restarts],
        "interruption": interruption_status(snap.interruption),
        "failure": failure_status(snap.failure),
        "launch_end": asdict(snap.launch_end) if snap.launch_end else None,
        "log_age_s": log_age,
        "last_step_age_s": round(step_age, 1) if step_age is not None else None,
        "stall": {
            "threshold_s": round(threshold, 1),
            "step_interval_s": round(interval, 3) if interval is not None else None,
            "interval_source": interval_source,
            "floor_s": STALL_FLOOR_S,
            "factor": STALL_FACTOR,
        },
        "phase": snap.phase,
        "acceptance": acceptance_status(snap),
    }


def curves(snap: Snapshot) -> dict:
    loss = downsample([p for p in snap.points if p.loss is not None and math.isfinite(p.loss)], CURVE_POINTS)
    lr = downsample([p for p in snap.points if p.lr is not None and math.isfinite(p.lr)], CURVE_POINTS)
    eal = downsample([p for p in snap.points if p.eal is not None and math.isfinite(p.eal)], CURVE_POINTS)
    return {
        "loss": [[p.step, p.loss] for p in loss],
        "lr": [[p.step, p.lr] for p in lr],
        "eal": [[p.step, p.eal] for p in eal],
        "points_total": len(snap.points),
    }


class Monitor:
    """The readings behind one app; the log is followed incrementally across requests."""

    def __init__(self, config: MonitorConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.follower = LogFollower(config.log)
        self.gpus = Cached(config.cache_s, lambda: query_gpus(config.nvidia_smi))
        self.health = Cached(config.cache_s, lambda: server_health(config.server_url, config.health_timeout_s))

    def status(self) -> dict:
        snap, tail, log_stat = self.follower.refresh()
        # after the read: a step read in this request is never newer than "now"
        now = self.clock()
        gpus, gpu_error = self.gpus.get()
        health = self.health.get()
        checkpoint, checkpoint_count, checkpoint_error = newest_checkpoint(self.config.checkpoints)
        return {
            "title": self.config.title,
            "generated_at": _iso(now),
            "training": training_status(snap, self.config, log_stat, now),
            "curves": curves(snap),
            "gpus": [asdict(gpu) for gpu in gpus],
            "gpu_error": gpu_error,
            "server": asdict(health),
            "checkpoint": (
                {
                    "name": checkpoint.name,
                    "step": checkpoint.step,
                    "epoch": checkpoint.epoch,
                    "time": _iso(checkpoint.mtime),
                    "age_s": round(now - checkpoint.mtime, 1),
                    "path": checkpoint.path,
                }
                if checkpoint
                else None
            ),
            "checkpoint_count": checkpoint_count,
            "checkpoint_error": checkpoint_error,
            "log": {
                "path": str(self.config.log),
                "exists": log_stat is not None,
                "size": log_stat.st_size if log_stat is not None else None,
                "modified": _iso(log_stat.st_mtime) if log_stat is not None else None,
                "tail": tail,
            },
        }


def _host_name(host: str) -> str:
    """The name of a Host header without its port: `[::1]:8686` → `::1`, `localhost:8686` → `localhost`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _presented_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.args.get("token")


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def create_app(config: MonitorConfig, clock: Callable[[], float] = time.time) -> Flask:
    """The app; `clock` gives "now" in seconds since the epoch (tests pass fixed times)."""
    app = Flask(__name__)
    app.json.sort_keys = False
    monitor = Monitor(config, clock)
    app.extensions["gpuhosts_monitor"] = monitor
    app.jinja_env.filters["fmt"] = _fmt
    expected = config.token.encode() if config.token else None

    allowed = {"localhost", "127.0.0.1", "::1", config.bind.lower(), *(h.lower() for h in config.allowed_hosts)}

    @app.before_request
    def require_token():
        if expected is None:
            # Without a token only loopback can reach the monitor, and a web page's script reaches loopback too:
            # a name of its own that resolves to 127.0.0.1 (DNS rebinding, or an SSH tunnel's local port) makes the
            # browser send the page's requests here. Such requests carry that name as their Host; refuse them.
            if _host_name(request.host) not in allowed:
                return Response(f"misdirected: Host {request.host!r} is not this monitor's; open it as "
                                f"http://127.0.0.1:{config.port}/ (or pass --allowed-host)\n", status=421,
                                mimetype="text/plain")
            return None
        given = _presented_token()
        if given is not None and hmac.compare_digest(given.encode(), expected):
            return None
        return Response(
            "unauthorized: send Authorization: Bearer <token> or ?token=<token>\n",
            status=401,
            mimetype="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="gpuhosts-monitor"'},
        )

    @app.after_request
    def harden(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        nonce = g.get("csp_nonce")
        if nonce:
            # the page may talk only to this server; inline code runs only when it carries this response's nonce
            response.headers["Content-Security-Policy"] = (
                f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                "frame-ancestors 'none'"
            )
        return response

    @app.get("/")
    def index():
        g.csp_nonce = secrets.token_urlsafe(16)
        return render_template("index.html", status=monitor.status(), nonce=g.csp_nonce)

    @app.get("/api/status")
    def api_status():
        return jsonify(monitor.status())

    @app.get("/metrics")
    def metrics():
        return Response(exposition(monitor.status()), content_type=CONTENT_TYPE)

    @app.get("/healthz")
    def healthz():
        return Response("ok\n", mimetype="text/plain")

    @app.get("/favicon.ico")
    def favicon():
        return Response(status=204)

    return app
