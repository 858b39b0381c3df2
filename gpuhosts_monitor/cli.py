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
from gpuhosts_monitor.bind import is_loopback

EXIT_USAGE = 2
log = logging.getLogger("gpuhosts_monitor")


class ConfigError(Exception):
    """A setting the monitor refuses to start with; the message says which and why."""


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
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a name the monitor may be opened by besides localhost and the bind address, when no "
                             "token is set (repeatable)")
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
        allowed_hosts=tuple(args.allowed_host),
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
