"""The Flask application: one page, /api/status with every number the page shows, /healthz."""

from __future__ import annotations

import hmac
import math
import secrets
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from flask import Flask, Response, g, jsonify, render_template, request

from gpuhosts_monitor.parse import Snapshot, downsample
from gpuhosts_monitor.sources import Cached, LogFollower, newest_checkpoint, query_gpus, server_health

CURVE_POINTS = 500


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


def training_status(snap: Snapshot, config: MonitorConfig, log_stat, now: float) -> dict:
    latest = snap.latest
    total, total_source = (config.total_steps, "cli") if config.total_steps else (snap.total_steps(), "log")
    if total is None:
        total_source = None
    rate, rate_source = snap.step_rate()
    step = latest.step if latest else None
    eta = None
    if total is not None and step is not None and rate:
        eta = round(max(0, total - step) / rate)
    log_age = round(now - log_stat.st_mtime, 1) if log_stat is not None else None
    if log_stat is None:
        state = "no-log"
    elif snap.finished:
        state = "finished"
    elif latest is None:
        state = "waiting"
    else:
        state = "running"
    return {
        "state": state,
        "step": step,
        "total_steps": total,
        "total_steps_source": total_source,
        "progress": round(min(1.0, step / total), 4) if total and step is not None else None,
        "epoch": latest.epoch if latest else None,
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
        "log_age_s": log_age,
    }


def curves(snap: Snapshot) -> dict:
    loss = downsample([p for p in snap.points if p.loss is not None and math.isfinite(p.loss)], CURVE_POINTS)
    lr = downsample([p for p in snap.points if p.lr is not None and math.isfinite(p.lr)], CURVE_POINTS)
    return {
        "loss": [[p.step, p.loss] for p in loss],
        "lr": [[p.step, p.lr] for p in lr],
        "points_total": len(snap.points),
    }


class Monitor:
    """The readings behind one app; the log is followed incrementally across requests."""

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.follower = LogFollower(config.log)
        self.gpus = Cached(config.cache_s, lambda: query_gpus(config.nvidia_smi))
        self.health = Cached(config.cache_s, lambda: server_health(config.server_url, config.health_timeout_s))

    def status(self) -> dict:
        now = time.time()
        snap, tail, log_stat = self.follower.refresh()
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


def create_app(config: MonitorConfig) -> Flask:
    app = Flask(__name__)
    app.json.sort_keys = False
    monitor = Monitor(config)
    app.extensions["gpuhosts_monitor"] = monitor
    app.jinja_env.filters["fmt"] = _fmt
    expected = config.token.encode() if config.token else None

    @app.before_request
    def require_token():
        if expected is None:
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

    @app.get("/healthz")
    def healthz():
        return Response("ok\n", mimetype="text/plain")

    @app.get("/favicon.ico")
    def favicon():
        return Response(status=204)

    return app
