"""The training monitor as its tests serve it: the captured training logs and nvidia-smi output, a checkpoint
folder laid out per case, a stand-in hidden-state server (`health_server`, registered in conftest.py), the app
built over them at a fixed clock, and headless chromium for its page.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
import pytest
from conftest import FIXTURES
from gpuhosts_monitor.app import MonitorConfig, create_app


TRAINING = FIXTURES / "training"


SMI = TRAINING / "nvidia-smi"


TOKEN = "Zq7-test-token-4f1c9e"


def fake_nvidia_smi(tmp_path: Path, output: Path | None = None, rc: int = 0, message: str = "") -> Path:
    """Answers only the monitor's exact query, the way nvidia-smi does."""
    script = tmp_path / "nvidia-smi"
    body = f'cat "{output}"' if output else f'echo "{message}"'
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "{GPU_ARGS}" ] || {{ echo "unexpected arguments: $*" >&2; exit 2; }}\n'
        f"{body}\nexit {rc}\n"
    )
    script.chmod(0o755)
    return script


class HealthServer:
    """A stand-in for the hidden-state server: /health answers with `code`; every path asked is recorded."""

    def __init__(self, code: int = 200) -> None:
        self.code = code
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                outer.paths.append(self.path)
                status = outer.code if self.path == "/health" else 404
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def health_server():
    server = HealthServer()
    yield server
    server.close()


def make_checkpoints(root: Path, layout: dict[str, dict]) -> Path:
    """layout: name -> {"age": seconds ago, "files": {...}, "link": target}."""
    root.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for name, spec in layout.items():
        path = root / name
        if "link" in spec:
            path.symlink_to(spec["link"])
            continue
        path.mkdir()
        for file, content in spec.get("files", {}).items():
            (path / file).write_text(content)
        when = now - spec.get("age", 0)
        for item in [*path.iterdir(), path]:
            os.utime(item, (when, when), follow_symlinks=False)
    return root


SAFETENSORS = {"model.safetensors": "weights"}


# When the tests' logs were last written, and "now" for the app: five seconds later, a run still going.
LOG_WRITTEN = 1_777_629_702.0  # 2026-05-01T10:01:42Z, the fixtures' last record


JUST_AFTER = LOG_WRITTEN + 5


def served_log(tmp_path: Path, log: Path, written: float = LOG_WRITTEN) -> Path:
    """A copy of `log` whose mtime is `written`, so the stall rule sees a fixed age (a missing log stays missing)."""
    if not log.exists():
        return log
    copy = tmp_path / "served" / log.name
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(log.read_bytes())
    os.utime(copy, (written, written))
    return copy


def app_for(tmp_path: Path, log: Path, server_url: str, now: float = JUST_AFTER, **overrides):
    smi = overrides.pop("nvidia_smi", None) or fake_nvidia_smi(tmp_path, SMI / "query-gpu-monitor-idle.csv")
    checkpoints = overrides.pop("checkpoints", None) or make_checkpoints(
        tmp_path / "ckpt", {"0": {"age": 60, "files": SAFETENSORS}}
    )
    config = MonitorConfig(
        log=served_log(tmp_path, log), checkpoints=checkpoints, server_url=server_url, nvidia_smi=str(smi),
        cache_s=0, **overrides
    )
    return create_app(config, clock=lambda: now)


def run_chromium(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         f"--user-data-dir={tmp_path / ('profile-' + name)}", "--window-size=1280,900",
         "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )


GPU_ARGS = "--query-gpu=index,name,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits"


def chromium() -> str:
    path = shutil.which("chromium")
    if path:
        return path
    if os.environ.get("GPUHOSTS_ALLOW_NO_CHROMIUM") == "1":
        pytest.skip("chromium missing and GPUHOSTS_ALLOW_NO_CHROMIUM=1")
    pytest.fail("chromium is missing: make system-deps installs chromium")
