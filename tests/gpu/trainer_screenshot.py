"""The monitor's page over what the GPU run of the trainer brought back, in headless Chromium.

    .venv/bin/python tests/gpu/trainer_screenshot.py RUN_OUT --png tests/fixtures/training/OUT.png

RUN_OUT is what tests/gpu/trainer_run.py wrote (train.log, checkpoints.tar.gz): the checkpoint directories are
unpacked without their weights, which the monitor does not read (it names a checkpoint by its directory and
training_state.json), and the monitor serves the real log over them, as its unit does on the node, with the
GPU machine's nvidia-smi reading replaced by none (this machine has no GPU, and the page says so).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_out", type=Path)
    parser.add_argument("--png", type=Path, required=True)
    parser.add_argument("--title", default="DFlash training of Qwen/Qwen3.6-27B")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with tarfile.open(args.run_out / "checkpoints.tar.gz") as tar:
            tar.extractall(root, filter="data")
        checkpoints = next(p for p in root.iterdir() if p.is_dir() and not p.name.endswith("-smoke"))
        port = free_port()
        monitor = subprocess.Popen(
            [sys.executable, "-m", "gpuhosts_monitor", "--log", str(args.run_out / "train.log"), "--checkpoints",
             str(checkpoints), "--server-url", "http://127.0.0.1:9", "--port", str(port), "--title", args.title,
             "--nvidia-smi", str(root / "no-nvidia-smi")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                    break
                except OSError:
                    if monitor.poll() is not None:
                        raise SystemExit("the monitor exited")
                    time.sleep(0.1)
            args.png.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            "--no-first-run", f"--user-data-dir={root / 'profile'}", "--window-size=1280,1600",
                            "--virtual-time-budget=5000", f"--screenshot={args.png.resolve()}",
                            f"http://127.0.0.1:{port}/"], check=True, capture_output=True, timeout=120)
        finally:
            monitor.terminate()
            monitor.wait(timeout=10)
    print(f"screenshot in {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
