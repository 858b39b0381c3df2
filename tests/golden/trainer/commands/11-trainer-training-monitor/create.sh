# managed by gpuhosts — unit training-monitor; generated from templates/, do not edit on the host.
set -euo pipefail
umask 022
# Empty on a real host; the simulated host of the tests points it at its tree (docs/fakehost-contract.md).
root="${GPUHOSTS_HOST_ROOT:-}"
unit=training-monitor
# shellcheck disable=SC2034  # shared by every unit; not every unit keeps state
state_dir="$root/var/lib/gpuhosts"
changed=0
reboot_required=0
file_changed=0

say() { printf '%s: %s\n' "$unit" "$*"; }
refuse() { printf '%s: refused: %s\n' "$unit" "$*" >&2; exit 1; }
note_change() { changed=1; say "changed: $*"; }

# install_file PATH MODE < content — writes only when content or mode differ; sets file_changed.
# shellcheck disable=SC2034  # file_changed is read by the units that react to a change
install_file() {
  local target="$root$1" mode="$2" tmp
  file_changed=0
  mkdir -p "$(dirname "$target")"
  tmp="$(mktemp "$target.gpuhosts.XXXXXX")"
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$target" ] && cmp -s "$tmp" "$target" && [ "$(stat -c %a "$target")" = "$(stat -c %a "$tmp")" ]; then
    rm -f "$tmp"
    return 0
  fi
  mv -f "$tmp" "$target"
  file_changed=1
  note_change "wrote $1"
}

# remove_file PATH — sets file_changed.
# shellcheck disable=SC2034
remove_file() {
  file_changed=0
  if [ -e "$root$1" ] || [ -L "$root$1" ]; then
    rm -f "$root$1"
    file_changed=1
    note_change "removed $1"
  fi
}

# sysfs_write PATH VALUE — a write to a kernel control file (driver_override, bind, unbind, drivers_probe).
sysfs_write() {
  printf '%s\n' "$2" >"$root$1"
  if [ -n "${GPUHOSTS_SYSFS_HOOK:-}" ]; then
    "$GPUHOSTS_SYSFS_HOOK" "$1"
  fi
}

# --- host facts -------------------------------------------------------------------------------------------
# The loaded nvidia kernel module's version, empty when none is loaded. The version is found by its shape, not
# its column: /proc/driver/nvidia/version words it differently for the open and the proprietary module.
module_version() {
  if [ -r "$root/sys/module/nvidia/version" ]; then
    cat "$root/sys/module/nvidia/version"
  elif [ -r "$root/proc/driver/nvidia/version" ]; then
    grep -m1 '^NVRM version:' "$root/proc/driver/nvidia/version" | grep -oE '[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2,3})?' | head -n1
  fi
}

# The installed NVIDIA user space (the version in libnvidia-ml's file name), empty when none.
userspace_version() {
  local lib
  for lib in "$root"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*; do
    [ -e "$lib" ] || continue
    printf '%s\n' "${lib##*/libnvidia-ml.so.}"
    return 0
  done
}

# char_major NAME — the major of a character device in /proc/devices; nvidia-uvm's is dynamic.
char_major() {
  awk -v name="$1" '/^Character devices:/ {c = 1; next} /^Block devices:/ {c = 0} c && $2 == name {print $1; exit}' \
    "$root/proc/devices"
}

# gpu_minor ADDRESS — the GPU's minor under major 195, from the driver's own record (not PCI order).
gpu_minor() {
  local info="$root/proc/driver/nvidia/gpus/$1/information"
  [ -r "$info" ] || return 0
  sed -nE 's/^Device Minor:[[:space:]]*([0-9]+).*/\1/p' "$info"
}

# pci_driver ADDRESS — the driver bound to a PCI function, empty when unbound.
pci_driver() {
  local link="$root/sys/bus/pci/devices/$1/driver"
  if [ -L "$link" ]; then
    basename "$(readlink "$link")"
  fi
}

# slot_functions SLOT — every function of a PCI slot (GPU, HDMI audio, USB-C …) that the host has.
slot_functions() {
  local dev
  for dev in "$root/sys/bus/pci/devices/$1".*; do
    [ -e "$dev" ] && basename "$dev"
  done
  return 0
}

# Normalise nvidia-smi's "00000000:41:00.0" and lspci's "41:00.0" to sysfs's "0000:41:00.0".
normal_address() {
  local id="${1,,}"
  id="${id// /}"
  case "$id" in
    ????????:*) id="${id:4}" ;;
    ??:??.?|??:??) id="0000:$id" ;;
  esac
  printf '%s\n' "$id"
}

# smi_rows — nvidia-smi's `--format=csv,noheader` rows whose first field is a bus id, as "address field…".
smi_rows() {
  local bus rest
  while IFS=',' read -r bus rest; do
    [ -n "$bus" ] || continue
    rest="${rest//,/ }"
    printf '%s %s\n' "$(normal_address "$bus")" "$(printf '%s' "$rest" | xargs)"
  done
}

# owe NAME / owed NAME / settled NAME — work that must follow a change (rebuilding the initramfs) is noted on the
# host before the change, so a run cut off in between still does it next time.
owe() { mkdir -p "$state_dir"; : >"$state_dir/$1.owed"; }
owed() { [ -f "$state_dir/$1.owed" ]; }
settled() { rm -f "$state_dir/$1.owed"; }

finish() {
  if [ "$reboot_required" = 1 ]; then
    mkdir -p "$root/run/gpuhosts"
    : >"$root/run/gpuhosts/reboot-required"
    say "reboot required"
  fi
  if [ "$changed" = 1 ]; then
    say "done: changed"
  else
    say "done: no change"
  fi
}
# The monitoring web UI on 127.0.0.1:8686.
unit_name=gpuhosts-training-monitor.service
restart=0
[ -e "$root"/opt/gpuhosts/monitor/venv/bin/python ] || refuse "/opt/gpuhosts/monitor/venv/bin/python is missing; the step that provides it comes first"
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__init__.py 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — gpuhosts_monitor/__init__.py of the gpuhosts repository; do not edit on the node
"""Training monitor web UI for a DFlash drafter training node."""
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/__main__.py 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — gpuhosts_monitor/__main__.py of the gpuhosts repository; do not edit on the node
import sys

from gpuhosts_monitor.cli import main

sys.exit(main())
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/app.py 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — gpuhosts_monitor/app.py of the gpuhosts repository; do not edit on the node
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
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/cli.py 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — gpuhosts_monitor/cli.py of the gpuhosts repository; do not edit on the node
"""Command line: check the settings, refuse an exposed bind without a token, serve."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import re
import stat
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from werkzeug.serving import WSGIRequestHandler, make_server

from gpuhosts_monitor.app import MonitorConfig, create_app

EXIT_USAGE = 2
log = logging.getLogger("gpuhosts_monitor")


class ConfigError(Exception):
    """A setting the monitor refuses to start with; the message says which and why."""


def is_loopback(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def read_token(path: Path) -> str:
    """The token file must be private to its owner: anyone who can read it can read the training node's state."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"--token-file {path}: not a regular file")
    if st.st_mode & 0o077:
        raise ConfigError(
            f"--token-file {path}: mode {stat.S_IMODE(st.st_mode):04o} lets others read it; chmod 0600 {path}"
        )
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--token-file {path}: cannot read it ({exc})") from None
    if not token:
        raise ConfigError(f"--token-file {path}: empty")
    if any(ch.isspace() for ch in token) or not token.isprintable():
        raise ConfigError(f"--token-file {path}: the token must be one line of printable characters without spaces")
    return token


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpuhosts_monitor",
        description="Web page showing a drafter training run: progress, loss and lr curves, GPUs, the hidden-state "
        "server's health, the newest checkpoint and the log tail.",
    )
    parser.add_argument("--log", required=True, type=Path, help="the trainer's log file (stdout and stderr)")
    parser.add_argument("--checkpoints", required=True, type=Path, help="the trainer's checkpoint directory")
    parser.add_argument("--server-url", required=True, help="hidden-state server; GET <URL>/health is polled")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8686, help="port to listen on (default: 8686)")
    parser.add_argument(
        "--token-file",
        type=Path,
        help="0600 file holding the token every request must present; required to bind beyond loopback",
    )
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to run (default: from PATH)")
    parser.add_argument("--total-steps", type=int, help="steps of the whole run (default: what the log tells)")
    parser.add_argument("--title", default="Drafter training", help="page title")
    return parser


def config_from_args(args: argparse.Namespace) -> MonitorConfig:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: not a port number")
    if args.total_steps is not None and args.total_steps <= 0:
        raise ConfigError(f"--total-steps {args.total_steps}: must be positive")
    url = urlsplit(args.server_url)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError(f"--server-url {args.server_url!r}: expected http://host:port")
    if not args.bind or re.search(r"\s", args.bind):
        raise ConfigError(f"--bind {args.bind!r}: not an address")
    if args.token_file is None and not is_loopback(args.bind):
        raise ConfigError(
            f"--bind {args.bind} would expose the monitor beyond this host; give --token-file with a 0600 file "
            "holding a token, or bind 127.0.0.1"
        )
    token = read_token(args.token_file) if args.token_file is not None else None
    return MonitorConfig(
        log=args.log,
        checkpoints=args.checkpoints,
        server_url=args.server_url,
        bind=args.bind,
        port=args.port,
        token=token,
        nvidia_smi=args.nvidia_smi,
        total_steps=args.total_steps,
        title=args.title,
    )


class RequestLog(WSGIRequestHandler):
    """Access log without query strings: a browser passes the token as ?token=."""

    def log_request(self, code="-", size="-") -> None:
        path = self.path.split("?", 1)[0]
        log.info('%s "%s %s" %s', self.address_string(), self.command, path, code)

    def log_error(self, format: str, *args) -> None:  # noqa: A002 - the base class's signature
        # werkzeug puts the raw request line into some errors
        log.warning("%s %s", self.address_string(), re.sub(r"token=[^\s&'\"]*", "token=[redacted]", format % args))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"gpuhosts_monitor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    app = create_app(config)
    # a long log takes seconds to parse; start before the first visitor waits for it
    follower = app.extensions["gpuhosts_monitor"].follower
    threading.Thread(target=follower.refresh, name="log-warmup", daemon=True).start()
    try:
        server = make_server(config.bind, config.port, app, threaded=True, request_handler=RequestLog)
    except OSError as exc:
        print(f"gpuhosts_monitor: cannot listen on {config.bind}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    host = f"[{config.bind}]" if ":" in config.bind else config.bind
    log.info(
        "serving %s on http://%s:%d/ (%s)",
        config.log,
        host,
        server.server_port,
        "token required" if config.token else "no token, loopback only",
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/parse.py 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — gpuhosts_monitor/parse.py of the gpuhosts repository; do not edit on the node
"""Turn a trainer's console log into training progress: step, loss, lr, epoch, tokens/s, restarts.

Formats understood (tests/fixtures/training/README.md has one captured sample of each):

* speculators' ``scripts/train.py`` (v0.5.0 … v0.9.0). Its ``Trainer`` logs one mapping per step through the
  ``speculators.metrics`` logger; ``FormatDictFilter`` flattens it to ``train/loss=2.441, …, epoch=0, lr=3.00e-04,
  global_step=38`` and rich's ``RichHandler`` prints that as ``[HH:MM:SS] INFO     <message>   trainer.py:587``,
  leaving the time out when it repeats and wrapping long messages onto continuation lines indented to the message
  column (80 columns when stdout is a file, the systemd case). Releases before 0.5.0 printed no ``global_step``.
  0.9.0 adds ``profile/tokens_per_s``. ``tqdm.rich`` prints one summary line per epoch (``Epoch 0 100% ━━ 24/24
  [ 0:00:48 < 0:00:00 , 0 it/s ]``) only when the epoch ends, because rich does not animate a file.
* transformers' ``Trainer`` (``ProgressCallback``): a tqdm bar over ``max_steps`` rewritten with carriage returns and
  ``{'loss': '2.911', 'learning_rate': '4.25e-05', 'epoch': '0.5'}`` written through it (strings since 5.x, floats
  before); no step in the dict, so the bar's position is the step.
* Any trainer that prints ``key=value`` pairs (``step=10 loss=2.31 lr=1e-4``) and classic tqdm bars.

Everything else (warnings, tracebacks, torchrun's banner, half-written last lines) is skipped.

A restart shows as a step that does not advance or as a start-up message. Steps are then mapped onto the earlier
run's axis: speculators 0.5.0 starts ``global_step`` again at 0 in the resumed epoch, 0.9.0 and transformers continue
from the checkpoint's step. Points at or after the resume step are dropped from the curve, since the resumed run
recomputes them.
"""

from __future__ import annotations

import ast
import calendar
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# torchrun --tee / --redirects and some launchers prefix each worker line with its rank.
RANK_PREFIX_RE = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
RICH_HEAD_RE = re.compile(
    r"^(?:\[(?:(?P<date>\d\d/\d\d/\d\d) )?(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)\]|(?P<blank> {2,}))"
    r" (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) +(?P<msg>\S.*)$"
)
RICH_PATH_RE = re.compile(r"\s+[\w.\-]+\.py:\d+$")
ISO_TIME_RE = re.compile(
    r"^\[?(?P<Y>\d{4})-(?P<M>\d\d)-(?P<D>\d\d)[ T](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d+))?"
    r"(?:Z|[+-]\d\d:?\d\d)?\]?\s*"
)
TQDM_CLASSIC_RE = re.compile(
    r"^(?P<desc>.*?):?\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[[^<\]]*<[^,\]]*,\s*(?:(?P<rate>[\d.]+)(?P<unit>s/it|it/s|[^\s,\]]*/s)|\?[^\]]*)"
)
TQDM_RICH_RE = re.compile(
    r"^(?P<desc>.*?)\s*(?P<pct>\d+)%\s+\S*\s+(?P<n>\d+)/(?P<total>\d+)\s+"
    r"\[\s*[\d:]+\s*<\s*[-\d:]+\s*,\s*(?:(?P<rate>[\d.,]+)\s*(?P<unit>it/s)|\?\s*it/s)\s*\]"
)
EPOCH_DESC_RE = re.compile(r"^Epoch\s+\d+\b")
TRAIN_EPOCH_RE = re.compile(r"Training epoch (?P<n>\d+)/(?P<of>\d+) (?P<what>started|completed)")
VAL_EPOCH_RE = re.compile(r"Validation epoch (?P<n>\d+)/(?P<of>\d+) (?P<what>started|completed)")
FAST_SKIP_RE = re.compile(r"Fast-skipping (?P<n>\d+) batches")
# Messages printed once per launch, before the first step: speculators', transformers', torchrun's, and the
# "resuming from <checkpoint>" of gpuhosts' training launch script.
START_MARKERS = re.compile(
    r"No previous (?:training )?checkpoint found"
    r"|^resuming from /"
    r"|Found checkpoint at "
    r"|Resuming (?:training on|mid-epoch)"
    r"|\*{5} Running training \*{5}"
    r"|Setting OMP_NUM_THREADS environment variable for each process"
)

LOGGER_PREFIX_RE = re.compile(r"^.*[:\]]")

STEP_KEYS = ("global_step", "train/global_step", "step", "train/step", "iteration", "iter")
LOSS_KEYS = ("train/loss", "loss", "train_loss")
LR_KEYS = ("lr", "learning_rate", "train/lr", "train/learning_rate")
EPOCH_KEYS = ("epoch", "train/epoch")
TOKENS_KEYS = (
    "profile/tokens_per_s",
    "tokens_per_s",
    "tokens_per_sec",
    "tokens_per_second",
    "train/tokens_per_second",
    "tokens/s",
    "tok/s",
)
VAL_PREFIXES = ("val/", "eval/", "eval_", "val_")
# transformers prints these once, after the last step.
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second")
RATE_WINDOW = 50


@dataclass(frozen=True)
class Point:
    """One logged training step, on the step axis of the whole run (restarts mapped onto it)."""

    step: int
    loss: float | None
    lr: float | None
    epoch: float | None
    tokens_per_s: float | None
    time: float | None
    """Seconds from the log's own timestamps; only differences within one launch are meaningful."""
    line: int


@dataclass(frozen=True)
class Restart:
    line: int
    """Line of the first step logged after the restart."""
    from_step: int
    """Last step logged before it."""
    at_step: int
    """Step it resumed at, on the run's axis."""
    raw_step: int
    """The step as the restarted trainer printed it."""


@dataclass
class Snapshot:
    points: list[Point]
    metrics: dict[str, float]
    """Every number of the newest training record, as the trainer named it."""
    epochs_total: int | None
    steps_per_epoch: int | None
    tqdm_total: int | None
    tqdm_rate: float | None
    """Steps per second from the newest training progress bar."""
    val: dict[str, float]
    val_step: int | None
    restarts: list[Restart]
    finished: bool
    lines: int
    segment_start: int
    """Index into points of the first point of the current launch."""

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    def total_steps(self) -> int | None:
        """Steps of the whole run as far as the log tells: a global bar's total, else epochs × steps per epoch."""
        if self.tqdm_total:
            return self.tqdm_total
        if self.epochs_total and self.steps_per_epoch:
            return self.epochs_total * self.steps_per_epoch
        return None

    def step_rate(self) -> tuple[float | None, str | None]:
        """Steps per second over the newest points of this launch, from log timestamps, else from tqdm."""
        window = [p for p in self.points[self.segment_start :][-RATE_WINDOW:] if p.time is not None]
        if len(window) >= 2:
            dt = window[-1].time - window[0].time
            ds = window[-1].step - window[0].step
            if dt > 0 and ds > 0:
                return ds / dt, "log-timestamps"
        if self.tqdm_rate:
            return self.tqdm_rate, "tqdm"
        return None, None


def downsample(points: list[Point], limit: int = 500) -> list[Point]:
    """Evenly spaced points, keeping the first and the last, so a curve of any length costs at most `limit`."""
    n = len(points)
    if n <= limit:
        return list(points)
    if limit < 2:
        return points[-limit:] if limit else []
    picked = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return [points[i] for i in picked]


def _number(text: str) -> float | None:
    text = text.strip().rstrip(".,;")
    if "_" in text or not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def key_values(message: str) -> dict[str, float]:
    """Numeric ``key=value`` pairs of a message; keys may hold spaces when pairs are comma separated."""
    if "=" not in message:
        return {}
    parts = re.split(r",\s+", message) if ", " in message else message.split()
    found: dict[str, float] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep:
            continue
        if ":" in key or "]" in key:
            # a logger prefix glued to the first key (INFO:speculators.metrics:train/loss=…); keys hold no ':'
            key = LOGGER_PREFIX_RE.sub("", key)
        key = key.strip()
        number = _number(value)
        if key and number is not None and "=" not in value:
            found[key.lower()] = number
    return found


def _first(values: dict[str, float], keys: Iterable[str]) -> float | None:
    for key in keys:
        if key in values and not math.isnan(values[key]):
            return values[key]
    return None


def _epoch(values: dict[str, float]) -> float | None:
    epoch = _first(values, EPOCH_KEYS)
    # speculators counts whole epochs, transformers fractions of one
    return int(epoch) if epoch is not None and epoch.is_integer() else epoch


def _lr(values: dict[str, float]) -> float | None:
    lr = _first(values, LR_KEYS)
    if lr is not None:
        return lr
    # speculators with --optimizer muon logs one lr per optimizer (lr/Muon, lr/AdamW); the first is taken
    for key, value in values.items():
        if key.startswith("lr/"):
            return value
    return None


def _dict_values(message: str) -> dict[str, float] | None:
    """The numbers of a printed Python dict (transformers), or None when the message holds none."""
    start, end = message.find("{"), message.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = ast.literal_eval(message[start : end + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    found: dict[str, float] = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(key, str):
            continue
        if isinstance(item, (int, float)):
            found[key.lower()] = float(item)
        elif isinstance(item, str) and (number := _number(item)) is not None:
            found[key.lower()] = number
    return found


@dataclass
class _Pending:
    """A rich record whose continuation lines may still follow."""

    line: int
    time: float | None
    indent: int
    parts: list[str] = field(default_factory=list)

    def message(self) -> str:
        return " ".join(self.parts)


class LogParser:
    """Feed physical lines (no newline) in order; ask for a snapshot at any time."""

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.metrics: dict[str, float] = {}
        self.epochs_total: int | None = None
        self.steps_per_epoch: int | None = None
        self.tqdm_total: int | None = None
        self.tqdm_rate: float | None = None
        self.tqdm_n: int | None = None
        self.val: dict[str, float] = {}
        self.val_step: int | None = None
        self.restarts: list[Restart] = []
        self.finished = False
        self.lines = 0
        self._pending: _Pending | None = None
        self._phase = "train"
        self._skip_batches = 0
        self._segment_start = 0
        self._segment_raw: int | None = None
        self._offset = 0
        self._derived = -1
        self._steps_printed = False
        self._start_marker = False
        self._rich_time: float | None = None
        self._rich_day = 0

    # -- input ---------------------------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed_line(line)

    def feed_line(self, raw: str) -> None:
        self.lines += 1
        # A carriage return redraws the terminal line: every piece is a state a terminal would have shown.
        for piece in raw.split("\r") if "\r" in raw else (raw,):
            if "\x1b" in piece:
                piece = ANSI_RE.sub("", piece)
            if piece.startswith("["):
                piece = RANK_PREFIX_RE.sub("", piece)
            text = piece.rstrip()
            if text and not text.isspace():
                self._logical(text, self.lines)

    def _logical(self, text: str, line: int) -> None:
        pending = self._pending
        # rich indents a wrapped message to its message column; anything less indented is another writer's line
        if pending is not None and len(text) > pending.indent and text[: pending.indent].isspace():
            pending.parts.append(text.strip())
            return
        self._flush()
        head = RICH_HEAD_RE.match(text)
        if head:
            message = RICH_PATH_RE.sub("", head["msg"])
            self._pending = _Pending(line=line, time=self._rich_clock(head), indent=head.start("msg"))
            self._pending.parts.append(message.strip())
            return
        when, message = self._iso_time(text)
        self._message(message, line, when)

    def finish(self) -> None:
        """Treat the record being assembled as complete (call at end of input)."""
        self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._message(pending.message(), pending.line, pending.time)

    def _rich_clock(self, head: re.Match) -> float | None:
        if head["h"] is None:
            # rich leaves the time out when it equals the previous record's
            return self._rich_time
        seconds = int(head["h"]) * 3600 + int(head["m"]) * 60 + int(head["s"])
        if head["date"]:
            month, day, year = (int(x) for x in head["date"].split("/"))
            when = float(calendar.timegm((2000 + year, month, day, 0, 0, 0)) + seconds)
        else:
            when = float(seconds + 86400 * self._rich_day)
            if self._rich_time is not None and when < self._rich_time - 43200:
                self._rich_day += 1
                when += 86400
        self._rich_time = when
        return when

    @staticmethod
    def _iso_time(text: str) -> tuple[float | None, str]:
        match = ISO_TIME_RE.match(text)
        if not match:
            return None, text
        parts = [int(match[k]) for k in ("Y", "M", "D", "h", "m", "s")]
        when = float(calendar.timegm((*parts,)))
        if match["frac"]:
            when += float("0." + match["frac"])
        return when, text[match.end() :]

    # -- interpretation ------------------------------------------------------------------------------------------

    def _message(self, message: str, line: int, when: float | None) -> None:
        if self._progress_bar(message):
            return
        values = _dict_values(message) if "{" in message else None
        if values is None:
            values = key_values(message)
            from_dict = False
        else:
            from_dict = True
        if values and self._record(values, line, when, from_dict):
            return
        self._markers(message)

    def _markers(self, message: str) -> None:
        if START_MARKERS.search(message):
            self._start_marker = True
            self.finished = False
            self._phase = "train"
        if match := TRAIN_EPOCH_RE.search(message):
            self.epochs_total = int(match["of"])
            self._phase = "train" if match["what"] == "started" else "between"
        elif match := VAL_EPOCH_RE.search(message):
            self._phase = "val" if match["what"] == "started" else "between"
        elif match := FAST_SKIP_RE.search(message):
            self._skip_batches = int(match["n"])

    def _progress_bar(self, message: str) -> bool:
        if "%" not in message or "/" not in message:
            return False
        match = TQDM_CLASSIC_RE.match(message) or TQDM_RICH_RE.match(message)
        if not match:
            return False
        if self._phase == "val":
            return True
        if match["unit"] not in (None, "it/s", "s/it"):
            return True  # bytes or examples per second: a download or a dataset map, not steps
        n, total = int(match["n"]), int(match["total"])
        rate = None
        if match["rate"]:
            value = float(match["rate"].replace(",", ""))
            if match["unit"] == "s/it":
                rate = 1.0 / value if value > 0 else None
            elif value > 0:
                rate = value
        desc = match["desc"].strip()
        if EPOCH_DESC_RE.match(desc):
            # one bar per epoch (speculators); after a mid-epoch resume it covers only the batches not skipped
            epoch_total = total + self._skip_batches
            self._skip_batches = 0
            self.steps_per_epoch = max(self.steps_per_epoch or 0, epoch_total)
        elif not desc or "train" in desc.lower():
            # transformers' training bar has no description, and neither has its shorter evaluation bar
            if total < (self.tqdm_total or 0):
                return True
            self.tqdm_total = total
            self.tqdm_n = n
        else:
            return True  # loading checkpoint shards and the like
        if rate is not None:
            self.tqdm_rate = rate
        return True

    def _record(self, values: dict[str, float], line: int, when: float | None, from_dict: bool) -> bool:
        if any(key in values for key in SUMMARY_KEYS):
            self.finished = True
            return True
        # a diverged run prints loss=nan: that is news, not noise
        loss = next((values[key] for key in LOSS_KEYS if key in values), None)
        lr = _lr(values)
        raw_step = _first(values, STEP_KEYS)
        is_val = any(key.startswith(VAL_PREFIXES) for key in values)
        if loss is None and is_val:
            self.val = {k: v for k, v in values.items() if k.startswith(VAL_PREFIXES)}
            self.val_step = self.points[-1].step if self.points else None
            return True
        if loss is None and not (raw_step is not None and lr is not None):
            return False
        explicit = raw_step is not None and float(raw_step).is_integer()
        if explicit:
            step = int(raw_step)
        elif from_dict and self.tqdm_n is not None:
            # transformers prints no step; its bar, drawn just before, is at the step being logged
            step, explicit = self.tqdm_n, True
        elif self._steps_printed:
            # the trainer prints its step; a record without one was cut short (the process died mid-write)
            return True
        else:
            step = None
        self._steps_printed = self._steps_printed or explicit
        epoch = _epoch(values)
        point = self._place(step, explicit, epoch, line)
        self.points.append(
            Point(
                step=point,
                loss=loss,
                lr=lr,
                epoch=epoch,
                tokens_per_s=_first(values, TOKENS_KEYS),
                time=when,
                line=line,
            )
        )
        self.metrics = dict(values)
        self.finished = False
        return True

    def _place(self, raw: int | None, explicit: bool, epoch: float | None, line: int) -> int:
        """The step on the run's axis; opens a new launch when the step goes back or a start-up message was seen."""
        if not explicit:
            raw = self._derived + 1 if not self._start_marker else 0
        restarted = self._start_marker or (
            explicit and self._segment_raw is not None and raw <= self._segment_raw
        )
        self._start_marker = False
        if restarted and self.points:
            previous = self.points[-1].step
            offset = 0
            resume_epoch_start = self._epoch_start(epoch)
            if resume_epoch_start is not None and raw < resume_epoch_start:
                offset = resume_epoch_start - raw
            self._offset = offset
            at = raw + offset
            while self.points and self.points[-1].step >= at:
                self.points.pop()
            self._segment_start = len(self.points)
            self.restarts.append(Restart(line=line, from_step=previous, at_step=at, raw_step=raw))
        elif restarted:
            self._offset = 0
            self._segment_start = 0
        self._segment_raw = raw
        self._derived = raw
        return raw + self._offset

    def _epoch_start(self, epoch: float | None) -> int | None:
        """First step the earlier launches logged in this epoch, else the step after the previous epoch's last."""
        if epoch is None:
            return None
        whole = math.floor(epoch)
        for point in self.points:
            if point.epoch is not None and math.floor(point.epoch) == whole:
                return point.step
        before = [p.step for p in self.points if p.epoch is not None and math.floor(p.epoch) == whole - 1]
        return before[-1] + 1 if before else None

    # -- output --------------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The state so far; a complete rich record still open for continuation lines is included tentatively."""
        # a copy: the follower keeps appending from other request threads
        points = list(self.points)
        metrics = self.metrics
        pending = self._pending
        if pending is not None:
            values = key_values(pending.message())
            raw = _first(values, STEP_KEYS)
            loss = _first(values, LOSS_KEYS)
            if (
                loss is not None
                and raw is not None
                and not self._start_marker
                and self._segment_raw is not None
                and raw > self._segment_raw
            ):
                points.append(
                    Point(
                        step=int(raw) + self._offset,
                        loss=loss,
                        lr=_lr(values),
                        epoch=_epoch(values),
                        tokens_per_s=_first(values, TOKENS_KEYS),
                        time=pending.time,
                        line=pending.line,
                    )
                )
                metrics = dict(values)
        return Snapshot(
            points=points,
            metrics=metrics,
            epochs_total=self.epochs_total,
            steps_per_epoch=self.steps_per_epoch,
            tqdm_total=self.tqdm_total,
            tqdm_rate=self.tqdm_rate,
            val=dict(self.val),
            val_step=self.val_step,
            restarts=list(self.restarts),
            finished=self.finished,
            lines=self.lines,
            segment_start=self._segment_start,
        )


def parse_text(text: str) -> Snapshot:
    """Parse a whole log; an unterminated last line is a write in progress and is left out."""
    parser = LogParser()
    lines = text.split("\n")
    parser.feed(lines[:-1])
    parser.finish()
    return parser.snapshot()
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/sources.py 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — gpuhosts_monitor/sources.py of the gpuhosts repository; do not edit on the node
"""Where the numbers come from: the trainer's log, nvidia-smi, the hidden-state server and the checkpoint folder."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from gpuhosts_monitor.parse import ANSI_RE, LogParser, Snapshot

TAIL_LINES = 50
TAIL_LINE_CHARS = 2000
READ_CHUNK = 4 << 20
GPU_QUERY = "--query-gpu=index,name,utilization.gpu,memory.used,memory.total"
GPU_TIMEOUT_S = 5.0


def display_line(raw: str) -> str:
    """What a terminal would show for a line: the last carriage-return piece, without escape codes."""
    pieces = [ANSI_RE.sub("", piece).rstrip() for piece in raw.split("\r")]
    shown = next((piece for piece in reversed(pieces) if piece.strip()), "")
    return shown[:TAIL_LINE_CHARS]


class LogFollower:
    """Reads what the trainer appended since the last call; starts over when the file is replaced or truncated."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._reset(None)

    def _reset(self, inode: tuple[int, int] | None) -> None:
        self._inode = inode
        self._offset = 0
        self._partial = b""
        self._parser = LogParser()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)

    def refresh(self) -> tuple[Snapshot, list[str], os.stat_result | None]:
        with self._lock:
            try:
                st = self.path.stat()
            except OSError:
                self._reset(None)
                return self._parser.snapshot(), [], None
            inode = (st.st_dev, st.st_ino)
            if inode != self._inode or st.st_size < self._offset:
                self._reset(inode)
            if st.st_size > self._offset:
                self._read()
            tail = list(self._tail)
            if self._partial:
                # a line still being written is shown, but only parsed once it is complete
                tail = [*tail[1 - TAIL_LINES :], display_line(self._partial.decode("utf-8", "replace"))]
            return self._parser.snapshot(), tail, st

    def _read(self) -> None:
        with self.path.open("rb") as fh:
            fh.seek(self._offset)
            while chunk := fh.read(READ_CHUNK):
                self._offset += len(chunk)
                lines = (self._partial + chunk).split(b"\n")
                self._partial = lines.pop()
                for raw in lines:
                    text = raw.decode("utf-8", "replace")
                    self._parser.feed_line(text)
                    self._tail.append(display_line(text))


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None


def _reading(text: str) -> float | None:
    """nvidia-smi prints [N/A] or [Not Supported] for readings a GPU or a MIG slice does not have."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_gpus(output: str) -> list[Gpu]:
    gpus = []
    for line in output.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        gpus.append(Gpu(int(fields[0]), fields[1], _reading(fields[2]), _reading(fields[3]), _reading(fields[4])))
    return gpus


def query_gpus(nvidia_smi: str) -> tuple[list[Gpu], str | None]:
    try:
        done = subprocess.run(
            [nvidia_smi, GPU_QUERY, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=GPU_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        return [], f"{nvidia_smi} not found"
    except subprocess.TimeoutExpired:
        return [], f"{nvidia_smi} did not answer within {GPU_TIMEOUT_S:g} s"
    except OSError as exc:
        return [], f"{nvidia_smi}: {exc.strerror or exc}"
    if done.returncode != 0:
        message = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()[0]
        return [], f"{nvidia_smi} exited {done.returncode}: {message}"
    gpus = parse_gpus(done.stdout)
    if not gpus:
        return [], f"{nvidia_smi} listed no GPU"
    return gpus, None


@dataclass(frozen=True)
class Health:
    url: str
    state: str
    """up (2xx), down (any other answer, or none)"""
    status_code: int | None
    latency_ms: float | None
    error: str | None


# The server is on this host or this network; a proxy from the environment must not answer for it.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def server_health(server_url: str, timeout_s: float = 2.0) -> Health:
    url = server_url.rstrip("/") + "/health"
    started = time.monotonic()
    try:
        with _NO_PROXY.open(urllib.request.Request(url, method="GET"), timeout=timeout_s) as response:
            code = response.status
            error = None
    except urllib.error.HTTPError as exc:
        code, error = exc.code, None
        exc.close()
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        # refused, timed out, or something that does not speak HTTP on that port
        reason = getattr(exc, "reason", exc)
        return Health(url, "down", None, None, str(reason) or type(reason).__name__)
    latency = (time.monotonic() - started) * 1000.0
    return Health(url, "up" if 200 <= code < 300 else "down", code, round(latency, 1), error)


@dataclass(frozen=True)
class Checkpoint:
    name: str
    path: str
    step: int | None
    epoch: int | None
    mtime: float


STEP_IN_NAME = re.compile(r"(?:checkpoint|ckpt|step|global_step|iter)[-_]?(\d+)", re.IGNORECASE)
EPOCH_IN_NAME = re.compile(r"epoch[-_]?(\d+)", re.IGNORECASE)
# what a checkpoint directory holds: weights (HF, speculators), optimizer state, trainer state
CHECKPOINT_FILES = re.compile(
    r".*\.(?:safetensors|bin|pt|pth)$|config\.json$|training_state\.json$|trainer_state\.json$"
)


def _state_file(directory: Path) -> tuple[int | None, int | None]:
    """Step and epoch the trainer wrote next to the weights: speculators' training_state.json, HF's trainer_state."""
    for name, step_key in (("training_state.json", "global_step"), ("trainer_state.json", "global_step")):
        try:
            state = json.loads((directory / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(state, dict):
            step = state.get(step_key)
            epoch = state.get("epoch")
            return (
                int(step) if isinstance(step, (int, float)) else None,
                int(epoch) if isinstance(epoch, (int, float)) else None,
            )
    return None, None


def _newest_mtime(directory: Path) -> tuple[float, bool]:
    """Latest write in the directory and whether it holds checkpoint files (a directory's own mtime misses rewrites)."""
    newest = directory.stat().st_mtime
    holds_checkpoint = False
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
            except OSError:
                continue
            holds_checkpoint = holds_checkpoint or bool(CHECKPOINT_FILES.match(entry.name))
    return newest, holds_checkpoint


def newest_checkpoint(root: Path) -> tuple[Checkpoint | None, int, str | None]:
    """The newest checkpoint under `root` and how many there are.

    Directories named with a number are ordered by it: a step (``checkpoint-1200``, ``step_300``) or an epoch
    (``epoch_3``, and speculators' bare ``3/``), the mtime breaking ties. A directory without a number counts when it
    holds checkpoint files and is newer than the best numbered one: speculators writes ``interrupted/`` when stopped.
    Symbolic links (``checkpoint_best``, ``epoch0_step16626``) point at directories already listed and are skipped.
    """
    try:
        entries = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return None, 0, f"{root} does not exist"
    except OSError as exc:
        return None, 0, f"{root}: {exc.strerror or exc}"
    numbered: list[tuple[int, float, Checkpoint]] = []
    unnumbered: list[Checkpoint] = []
    for entry in entries:
        directory = Path(entry.path)
        try:
            mtime, holds = _newest_mtime(directory)
        except OSError:
            continue
        state_step, state_epoch = _state_file(directory)
        step_match = STEP_IN_NAME.search(entry.name)
        epoch_match = EPOCH_IN_NAME.search(entry.name)
        name_step = int(step_match[1]) if step_match else None
        name_epoch = int(epoch_match[1]) if epoch_match else (int(entry.name) if entry.name.isdigit() else None)
        checkpoint = Checkpoint(
            name=entry.name,
            path=str(directory),
            step=name_step if name_step is not None else state_step,
            epoch=name_epoch if name_epoch is not None else state_epoch,
            mtime=mtime,
        )
        order = name_step if name_step is not None else name_epoch
        if order is not None:
            numbered.append((order, mtime, checkpoint))
        elif holds:
            unnumbered.append(checkpoint)
    count = len(numbered) + len(unnumbered)
    best = max(numbered, key=lambda item: (item[0], item[1]))[2] if numbered else None
    for candidate in unnumbered:
        if best is None or candidate.mtime > best.mtime:
            best = candidate
    return best, count, None


class Cached:
    """A reading reused for `ttl` seconds, so that several open pages do not each run nvidia-smi."""

    def __init__(self, ttl: float, produce) -> None:
        self.ttl = ttl
        self._produce = produce
        self._lock = threading.Lock()
        self._value = None
        self._at = -float("inf")

    def get(self):
        with self._lock:
            now = time.monotonic()
            if self.ttl <= 0 or now - self._at >= self.ttl:
                self._value = self._produce()
                self._at = now
            return self._value
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /opt/gpuhosts/monitor/app/gpuhosts_monitor/templates/index.html 0644 <<'GPUHOSTS_EOF'
<!-- managed by gpuhosts — gpuhosts_monitor/templates/index.html of the gpuhosts repository; do not edit on the node -->
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{ status.title }}</title>
<style nonce="{{ nonce }}">
  :root { --bg: #10141a; --card: #19202a; --line: #2a3442; --text: #e3e8ef; --dim: #8b97a8;
          --accent: #5ab0ff; --lr: #ffb454; --ok: #4cc38a; --bad: #ff6b6b; --warn: #f0c05a; }
  * { box-sizing: border-box; }
  body { margin: 0; padding: 16px 20px; background: var(--bg); color: var(--text);
         font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
  header { display: flex; align-items: baseline; gap: 16px; flex-wrap: wrap; margin-bottom: 12px; }
  h1 { font-size: 20px; margin: 0; }
  h2 { font-size: 13px; margin: 0 0 8px; color: var(--dim); font-weight: 600; text-transform: uppercase;
       letter-spacing: .04em; }
  .badge { padding: 2px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; background: var(--line); }
  .badge.running, .badge.up { background: #1f4d37; color: #9ff0c8; }
  .badge.finished { background: #1d3f66; color: #b5dbff; }
  .badge.down, .badge.no-log { background: #5a2323; color: #ffc2c2; }
  .badge.waiting { background: #574a1d; color: #ffe7a3; }
  .dim { color: var(--dim); }
  .grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(128px, 1fr)); gap: 10px; margin-bottom: 12px; }
  .card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
  .stat .v { font-size: 22px; font-variant-numeric: tabular-nums; }
  .stat .k { font-size: 12px; color: var(--dim); }
  .plots { display: grid; grid-template-columns: 2fr 1fr; gap: 10px; margin-bottom: 12px; }
  svg.plot { width: 100%; height: 260px; display: block; }
  .row2 { display: grid; grid-template-columns: 1fr 1fr; gap: 10px; margin-bottom: 12px; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  td, th { text-align: left; padding: 3px 6px; border-bottom: 1px solid var(--line); font-size: 13px; }
  th { color: var(--dim); font-weight: 600; }
  progress { width: 100%; height: 10px; accent-color: var(--accent); }
  td.bars { width: 32%; }
  td.bars progress { display: block; height: 7px; margin: 2px 0; }
  td.bars progress.mem { accent-color: var(--lr); }
  pre { margin: 0; max-height: 360px; overflow: auto; font: 12px/1.35 ui-monospace, Menlo, Consolas, monospace;
        white-space: pre; color: #cfd6df; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; font-size: 13px; }
  dt { color: var(--dim); }
  dd { margin: 0; font-variant-numeric: tabular-nums; word-break: break-all; }
  #error, .bad { color: var(--bad); }
  @media (max-width: 900px) { .plots, .row2 { grid-template-columns: 1fr; } }
</style>
</head>
<body>
{% set t = status.training %}
<header>
  <h1 id="title">{{ status.title }}</h1>
  <span id="state" class="badge {{ t.state }}">{{ t.state }}</span>
  <span class="dim">updated <span id="updated">{{ status.generated_at }}</span></span>
  <span id="error"></span>
</header>

<section class="grid">
  <div class="card stat"><div class="k">step</div>
    <div class="v"><span id="step">{{ t.step | fmt }}</span>
      <span class="dim">/ <span id="total">{{ t.total_steps | fmt }}</span></span></div>
    <progress id="progress" max="1" value="{{ t.progress or 0 }}"></progress></div>
  <div class="card stat"><div class="k">epoch</div><div class="v" id="epoch">{{ t.epoch | fmt }}</div></div>
  <div class="card stat"><div class="k">loss</div><div class="v" id="loss">{{ t.loss | fmt }}</div></div>
  <div class="card stat"><div class="k">learning rate</div><div class="v" id="lr">{{ t.lr | fmt(3) }}</div></div>
  <div class="card stat"><div class="k">tokens/s</div><div class="v" id="tokens">{{ t.tokens_per_s | fmt }}</div></div>
  <div class="card stat"><div class="k">steps/s</div><div class="v" id="rate">{{ t.steps_per_s | fmt(3) }}</div></div>
  <div class="card stat"><div class="k">ETA</div><div class="v" id="eta">{{ t.eta_s | fmt }}</div></div>
  <div class="card stat"><div class="k">restarts</div><div class="v" id="restarts">{{ t.restarts | length }}</div></div>
</section>

<section class="plots">
  <div class="card"><h2>loss <span class="dim" id="loss-count"></span></h2>
    <svg id="loss-plot" class="plot" viewBox="0 0 800 260" preserveAspectRatio="none" role="img"
         aria-label="loss by step"></svg></div>
  <div class="card"><h2>learning rate</h2>
    <svg id="lr-plot" class="plot" viewBox="0 0 400 260" preserveAspectRatio="none" role="img"
         aria-label="learning rate by step"></svg></div>
</section>

<section class="row2">
  <div class="card"><h2>GPUs</h2>
    <table><thead><tr><th>#</th><th>name</th><th>util</th><th>memory</th><th></th></tr></thead>
      <tbody id="gpus">
      {% for gpu in status.gpus %}
        <tr><td>{{ gpu.index }}</td><td>{{ gpu.name }}</td><td>{{ gpu.utilization_pct | fmt }} %</td>
          <td>{{ gpu.memory_used_mib | fmt }} / {{ gpu.memory_total_mib | fmt }} MiB</td><td class="bars"></td></tr>
      {% endfor %}
      </tbody></table>
    <div class="dim" id="gpu-error">{{ status.gpu_error or "" }}</div>
  </div>
  <div class="card"><h2>hidden-state server and checkpoints</h2>
    <dl>
      <dt>server</dt>
      <dd><span id="server-state" class="badge {{ status.server.state }}">{{ status.server.state }}</span>
        <span id="server-detail" class="dim">{{ status.server.status_code or status.server.error or "" }}</span></dd>
      <dt>health URL</dt><dd id="server-url">{{ status.server.url }}</dd>
      {% set c = status.checkpoint %}
      <dt>newest checkpoint</dt><dd id="ckpt-name">{{ c.name if c else (status.checkpoint_error or "none yet") }}</dd>
      <dt>its step / epoch</dt><dd id="ckpt-step">{{ (c.step | fmt) ~ " / " ~ (c.epoch | fmt) if c else "–" }}</dd>
      <dt>written</dt><dd id="ckpt-time">{{ c.time if c else "–" }}</dd>
      <dt>checkpoints</dt><dd id="ckpt-count">{{ status.checkpoint_count }}</dd>
      <dt>validation</dt><dd id="val">–</dd>
      <dt>log</dt><dd><span id="log-path">{{ status.log.path }}</span> <span class="dim" id="log-age"></span></dd>
    </dl>
  </div>
</section>

<section class="card"><h2>log tail</h2>
<pre id="log-tail">{{ status.log.tail | join("\n") }}</pre>
</section>

<script nonce="{{ nonce }}">
(function () {
  "use strict";
  var POLL_MS = 5000;
  var token = new URLSearchParams(window.location.search).get("token");
  var $ = function (id) { return document.getElementById(id); };

  function num(v, digits) {
    if (v === null || v === undefined) { return "\u2013"; }
    if (typeof v !== "number") { return String(v); }
    if (Number.isInteger(v) && Math.abs(v) < 1e7) { return String(v); }
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) { return v.toExponential((digits || 4) - 1); }
    return String(Number(v.toPrecision(digits || 4)));
  }
  function duration(s) {
    if (s === null || s === undefined) { return "\u2013"; }
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d > 0) { return d + "d " + h + "h"; }
    if (h > 0) { return h + "h " + m + "m"; }
    if (m > 0) { return m + "m " + Math.floor(s % 60) + "s"; }
    return Math.floor(s) + "s";
  }
  function setText(id, text) { var el = $(id); if (el) { el.textContent = text; } }
  function badge(id, state) { var el = $(id); el.textContent = state; el.className = "badge " + state; }

  /* Plots are inline SVG built from numbers only, so nothing from the log is ever parsed as markup. */
  function drawPlot(id, series, colour) {
    var svg = $(id);
    var box = svg.viewBox.baseVal, W = box.width, H = box.height;
    var L = 58, R = 10, T = 10, B = 26;
    if (!series.length) {
      svg.innerHTML = '<text x="' + W / 2 + '" y="' + H / 2 + '" fill="#8b97a8" text-anchor="middle" ' +
        'font-size="14">no data yet</text>';
      svg.setAttribute("data-points", "0");
      return;
    }
    var xs = series.map(function (p) { return p[0]; }), ys = series.map(function (p) { return p[1]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { var pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
    var px = function (x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
    var py = function (y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
    var out = [];
    for (var i = 0; i <= 4; i++) {
      var yv = y0 + (y1 - y0) * i / 4, yy = py(yv).toFixed(1);
      out.push('<line x1="' + L + '" x2="' + (W - R) + '" y1="' + yy + '" y2="' + yy +
        '" stroke="#2a3442" stroke-width="1"/>');
      out.push('<text x="' + (L - 6) + '" y="' + yy + '" fill="#8b97a8" font-size="11" text-anchor="end" ' +
        'dominant-baseline="middle">' + num(yv, 3) + '</text>');
      var xv = x0 + (x1 - x0) * i / 4, xx = px(xv).toFixed(1);
      out.push('<text x="' + xx + '" y="' + (H - 8) + '" fill="#8b97a8" font-size="11" text-anchor="middle">' +
        Math.round(xv) + '</text>');
    }
    var pts = series.map(function (p) { return px(p[0]).toFixed(1) + "," + py(p[1]).toFixed(1); }).join(" ");
    out.push('<polyline fill="none" stroke="' + colour + '" stroke-width="1.6" stroke-linejoin="round" points="' +
      pts + '"/>');
    svg.innerHTML = out.join("");
    svg.setAttribute("data-points", String(series.length));
  }

  function gpuRows(gpus) {
    var body = $("gpus");
    while (body.firstChild) { body.removeChild(body.firstChild); }
    gpus.forEach(function (gpu) {
      var tr = document.createElement("tr");
      var memFrac = gpu.memory_total_mib ? gpu.memory_used_mib / gpu.memory_total_mib : 0;
      [String(gpu.index), gpu.name, num(gpu.utilization_pct) + " %",
       num(gpu.memory_used_mib) + " / " + num(gpu.memory_total_mib) + " MiB"].forEach(function (text) {
        var td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
      });
      var td = document.createElement("td"), bar = document.createElement("progress");
      td.className = "bars";
      bar.max = 1; bar.value = (gpu.utilization_pct || 0) / 100; bar.title = "utilisation";
      var mem = document.createElement("progress");
      mem.max = 1; mem.value = memFrac || 0; mem.title = "memory"; mem.className = "mem";
      td.appendChild(bar); td.appendChild(mem); tr.appendChild(td); body.appendChild(tr);
    });
  }

  function render(s) {
    var t = s.training;
    setText("title", s.title);
    document.title = s.title;
    badge("state", t.state);
    setText("updated", s.generated_at);
    setText("step", num(t.step));
    setText("total", num(t.total_steps));
    $("progress").value = t.progress || 0;
    setText("epoch", t.epochs_total !== null && t.epoch !== null
      ? num(t.epoch) + " (" + t.epochs_total + " total)" : num(t.epoch));
    setText("loss", t.loss_finite === false ? "nan / inf" : num(t.loss));
    $("loss").className = t.loss_finite === false ? "v bad" : "v";
    setText("lr", num(t.lr, 3));
    setText("tokens", num(t.tokens_per_s, 3));
    setText("rate", num(t.steps_per_s, 3));
    setText("eta", duration(t.eta_s));
    setText("restarts", t.restarts.length
      ? t.restarts.length + " (last at step " + t.restarts[t.restarts.length - 1].at_step + ")" : "0");
    var vm = t.validation.metrics, vk = Object.keys(vm);
    setText("val", vk.length ? vk.map(function (k) { return k + "=" + num(vm[k]); }).join(", ")
      + " @ step " + num(t.validation.step) : "\u2013");
    setText("loss-count", "(" + s.curves.loss.length + " of " + s.curves.points_total + " points)");
    drawPlot("loss-plot", s.curves.loss, "#5ab0ff");
    drawPlot("lr-plot", s.curves.lr, "#ffb454");
    gpuRows(s.gpus);
    setText("gpu-error", s.gpu_error || "");
    badge("server-state", s.server.state);
    setText("server-detail", s.server.status_code !== null
      ? "HTTP " + s.server.status_code + (s.server.latency_ms !== null ? ", " + s.server.latency_ms + " ms" : "")
      : (s.server.error || ""));
    setText("server-url", s.server.url);
    var c = s.checkpoint;
    setText("ckpt-name", c ? c.name : (s.checkpoint_error || "none yet"));
    setText("ckpt-step", c ? num(c.step) + " / " + num(c.epoch) : "\u2013");
    setText("ckpt-time", c ? c.time + " (" + duration(c.age_s) + " ago)" : "\u2013");
    setText("ckpt-count", String(s.checkpoint_count));
    setText("log-path", s.log.path);
    setText("log-age", s.log.exists ? "last write " + duration(t.log_age_s) + " ago" : "missing");
    var pre = $("log-tail"), atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = s.log.tail.join("\n");
    if (atBottom) { pre.scrollTop = pre.scrollHeight; }
  }

  function poll() {
    var headers = token ? { "Authorization": "Bearer " + token } : {};
    fetch("api/status", { headers: headers, cache: "no-store", credentials: "omit" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (s) { setText("error", ""); render(s); })
      .catch(function (e) { setText("error", "status unavailable: " + e.message); })
      .then(function () { window.setTimeout(poll, POLL_MS); });
  }
  poll();
}());
</script>
</body>
</html>
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /etc/systemd/system/gpuhosts-training-monitor.service 0644 <<'GPUHOSTS_EOF'
# managed by gpuhosts — the training monitor web UI on 127.0.0.1:8686 (local only: reach it through an SSH tunnel).
[Unit]
Description=gpuhosts training monitor (127.0.0.1:8686)
After=network-online.target

[Service]
Type=simple
WorkingDirectory=/opt/gpuhosts/monitor/app
ExecStart=/opt/gpuhosts/monitor/venv/bin/python -m gpuhosts_monitor \
    --log /data/checkpoints/Qwen3.6-27B-DFlash/train.log \
    --checkpoints /data/checkpoints/Qwen3.6-27B-DFlash \
    --server-url http://127.0.0.1:8000 \
    --bind 127.0.0.1 \
    --port 8686 \
    --title 'DFlash training of Qwen/Qwen3.6-27B'
Restart=on-failure
RestartSec=10
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
[ "$restart" = 0 ] || systemctl daemon-reload
if ! systemctl is-enabled --quiet "$unit_name"; then
  systemctl enable --quiet "$unit_name"
  note_change "enabled $unit_name"
fi
if ! systemctl is-active --quiet "$unit_name"; then
  systemctl start "$unit_name"
  note_change "started $unit_name"
elif [ "$restart" = 1 ]; then
  systemctl restart "$unit_name"
  note_change "restarted $unit_name with its new settings"
fi
systemctl is-active --quiet "$unit_name" || refuse "$unit_name did not start; see journalctl -u $unit_name"
say "$unit_name is running"
finish
