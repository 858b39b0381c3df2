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
from dataclasses import dataclass, replace
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
    """Reads what the trainer appended since the last call; starts over when the file is replaced or truncated.

    It also notes when the latest step was written, on the wall clock: the log's own timestamps carry no date (rich
    prints ``[HH:MM:SS]``) and may come from another clock, so the file's mtime after the read that brought the step
    in stands for it. That is the time of the newest byte, never before the step: the age derived from it is at most
    the step's real age, so a log that keeps growing with warnings but no steps still ages, and a healthy run is never
    called stalled early.
    """

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
        self._latest: tuple[int, int] | None = None
        self._latest_seen_at: float | None = None

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
                # the file as it was when the read ended, so that no step read is newer than its mtime
                st = self._read()
            tail = list(self._tail)
            if self._partial:
                # a line still being written is shown, but only parsed once it is complete
                tail = [*tail[1 - TAIL_LINES :], display_line(self._partial.decode("utf-8", "replace"))]
            snap = self._parser.snapshot()
            latest = (snap.latest.step, snap.latest.line) if snap.latest else None
            if latest != self._latest:
                self._latest, self._latest_seen_at = latest, st.st_mtime if latest else None
            return replace(snap, step_seen_at=self._latest_seen_at), tail, st

    def _read(self) -> os.stat_result:
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
            return os.fstat(fh.fileno())


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
