"""Turn a trainer's console log into training progress: step, loss, lr, epoch, tokens/s, restarts, and a DFlash
drafter's acceptance figures (expected acceptance length, full accuracy, accuracy per block position).

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

DFlash acceptance figures are keys of the same speculators record. Their names come from
``models/dflash/metrics.py`` ``compute_metrics``: 0.5.0 returns ``full_acc`` and ``position {i} acc`` (with spaces,
printed ``train/position 14 acc=0.188``); 0.6.0 counts ``full_acc``/``position_{i}_acc`` as ``_sum``/``_total``
pairs that ``train/utils.py`` ``normalize_counted_metrics`` divides back into ``full_acc`` and ``position_{i}_acc``;
0.7.0 adds ``eal`` (expected accepted length: the mean accepted run per block plus the verifier's bonus token), the
same in 0.9.0. ``Trainer.train_epoch`` logs them under ``train`` and ``train/logger.py`` ``FormatDictFilter``
(``_flatten_dict`` joins with ``/``) prints ``train/eal=3.276, train/full_acc=0.412, train/position_1_acc=0.630``.

A graceful interruption (speculators 0.7.0 and later, ``train/graceful_shutdown.py``): on the first SIGINT or SIGTERM
the handler logs ``Received SIGTERM — interrupting training to save checkpoint. Send again to force immediate
exit.``, and ``with_graceful_shutdown`` then logs ``Training interrupted — attempting to save checkpoint
(timeout=120s, send Ctrl+C again to force exit)...`` and one of ``Interrupt checkpoint saved to '<save path>/
interrupted'``, ``Failed to save interrupt checkpoint`` (``logger.exception``) or, from its watchdog, ``Interrupt
checkpoint save timed out after 120s — forcing exit``. The launch ends there; the next start-up message (systemd
starting the unit again) or logged step clears it.

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
from dataclasses import dataclass, field, replace

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
    r"^training launch started$"
    r"|No previous (?:training )?checkpoint found"
    r"|^resuming from /"
    r"|Found checkpoint at "
    r"|Resuming (?:training on|mid-epoch)"
    r"|\*{5} Running training \*{5}"
    r"|Setting OMP_NUM_THREADS environment variable for each process"
)

# speculators v0.7.0 src/speculators/train/graceful_shutdown.py, GracefulShutdownHandler._handler and
# with_graceful_shutdown; searched, not anchored, so a logging format with a prefix matches too, and only as far as
# the first line of a record rich wraps at 80 columns, so a record still being written counts.
INTERRUPT_RECEIVED_RE = re.compile(r"Received (?P<signal>SIG[A-Z]+) — interrupting")
INTERRUPT_SAVE_RE = re.compile(
    r"(?P<saving>Training interrupted — attempting)"
    r"|Interrupt checkpoint saved to '(?P<path>.*)'"
    r"|(?P<failed>Failed to save interrupt checkpoint)"
    r"|(?P<timeout>Interrupt checkpoint save timed out after)"
)

# How a launch ends. gpuhosts' training unit runs the launch script with --ended as its ExecStopPost, which prints
# systemd's SERVICE_RESULT, EXIT_CODE and EXIT_STATUS (systemd.exec(5)): `exited/0` is a launch that ran to its end.
LAUNCH_ENDED_RE = re.compile(r"^training launch ended: result=(?P<result>\S+) exit=(?P<code>[\w-]+)/(?P<status>\S+)$")
# torchrun's summary of a worker that died (torch/distributed/elastic/multiprocessing/errors/__init__.py,
# ChildFailedError.format_msg and ProcessFailure): the first failure's fields, one per line, until the closing rule.
ROOT_CAUSE_RE = re.compile(r"^Root Cause \(first observed failure\):$")
FAILURE_FIELD_RE = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s*(?P<value>.*)$")
FAILURE_END_RE = re.compile(r"^=+$")

# gpuhosts' launch script runs the smoke run first into the same log (templates/training_job/train.sh.j2) and
# prints this when it passed: what follows is another run, the full one, with its own epochs and steps.
FULL_RUN_STARTS = re.compile(r"^smoke run passed: the full run starts$")
SMOKE_RUN_STARTS = re.compile(r"^smoke run: \d+ samples")

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
# DFlash acceptance figures (see the module docstring for the releases that print them)
EAL_KEYS = ("train/eal", "eal")
FULL_ACC_KEYS = ("train/full_acc", "full_acc")
POSITION_ACC_RE = re.compile(r"^(?:train/)?position[ _](?P<pos>\d+)[ _]acc$")
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
    eal: float | None = None
    """Expected acceptance length of a DFlash drafter (speculators 0.7.0 and later)."""
    full_acc: float | None = None


@dataclass(frozen=True)
class Acceptance:
    """A DFlash drafter's acceptance figures of one training record."""

    eal: float | None
    full_acc: float | None
    positions: list[tuple[int, float]]
    """(position in the block, accuracy), by position; the anchor (0) is not predicted and not logged."""

    @property
    def empty(self) -> bool:
        return self.eal is None and self.full_acc is None and not self.positions


def acceptance(values: dict[str, float]) -> Acceptance:
    positions = sorted(
        (int(match["pos"]), value)
        for key, value in values.items()
        if (match := POSITION_ACC_RE.match(key)) is not None
    )
    return Acceptance(eal=_first(values, EAL_KEYS), full_acc=_first(values, FULL_ACC_KEYS), positions=positions)


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


@dataclass(frozen=True)
class Interruption:
    """A signal that speculators' graceful shutdown answered: the launch stops, saving an ``interrupted``
    checkpoint first."""

    signal: str
    """"SIGTERM" (systemd stopping the unit, torchrun passing it on) or "SIGINT"."""
    line: int
    step: int | None
    """The last step logged before it, on the run's axis."""
    save: str = "pending"
    """"pending" (no save attempt logged: one follows at once, unless another exception replaced the interrupt on
    its way out, as when a DataLoader waiting on its workers reports one the signal killed), "saving", "saved",
    "failed" or "timed-out"."""
    checkpoint: str | None = None
    """Where the checkpoint was saved, as speculators printed it."""


def interruption_after(current: Interruption | None, message: str, line: int, step: int | None) -> Interruption | None:
    """The interruption a log message leaves: a new one on a signal, a later save stage for the current one."""
    if match := INTERRUPT_RECEIVED_RE.search(message):
        # torchrun sends the signal again; the handler ignores repeats and logs only the first
        return current or Interruption(signal=match["signal"], line=line, step=step)
    if current is None or not (match := INTERRUPT_SAVE_RE.search(message)):
        return current
    if match["saving"]:
        return replace(current, save="saving")
    if match["path"] is not None:
        return replace(current, save="saved", checkpoint=match["path"])
    return replace(current, save="failed" if match["failed"] else "timed-out")


@dataclass(frozen=True)
class Failure:
    """A launch that died: torchrun's root cause, or the launch's own non-zero end."""

    line: int
    step: int | None
    """The last step logged before it, on the run's axis."""
    exitcode: str | None = None
    """The worker's exit code as torchrun printed it (-9: killed by SIGKILL), else the launch's."""
    rank: str | None = None
    reason: str | None = None
    """torchrun's traceback field ("Signal 9 (SIGKILL) received by PID 4711"), or how the launch ended."""


@dataclass(frozen=True)
class LaunchEnd:
    """The training unit's ExecStopPost line."""

    result: str
    code: str
    status: str
    line: int

    @property
    def succeeded(self) -> bool:
        return self.code == "exited" and self.status == "0"


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
    phase: str = "train"
    """What the trainer said it is doing: "train", "val" (a validation pass started and not completed) or
    "between" (after an epoch or a validation pass completed, before the next starts)."""
    step_seen_at: float | None = None
    """Wall-clock time by which the latest step had been written: the log file's mtime when the read that brought
    it in finished (LogFollower sets it; parse_text cannot know it)."""
    interruption: Interruption | None = None
    """The current launch was interrupted by a signal (and nothing started since)."""
    failure: Failure | None = None
    """The current launch died (and nothing started since)."""
    launch_end: LaunchEnd | None = None
    """How the current launch ended, as its unit reported it; None while it runs (or when run by hand)."""
    epoch_number: int | None = None
    """The epoch as the trainer counts it in its own lines ("Training epoch 3/3 started": 3)."""
    smoke: bool = False
    """The log's newest run is the launch script's smoke run."""

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    def acceptance(self) -> Acceptance:
        """The DFlash figures of the newest training record."""
        return acceptance(self.metrics)

    def step_interval(self) -> tuple[float | None, str | None]:
        """Median seconds between consecutive logged steps of this launch, from log timestamps, else from tqdm.

        Logged steps, not optimizer steps: a trainer that logs every 5th step advances the log every 5 steps.
        """
        window = self.points[self.segment_start :][-RATE_WINDOW:]
        gaps = [
            b.time - a.time
            for a, b in zip(window, window[1:], strict=False)
            if a.time is not None and b.time is not None and b.step > a.step and b.time >= a.time
        ]
        if gaps:
            return _median(gaps), "log-timestamps"
        steps = [b.step - a.step for a, b in zip(window, window[1:], strict=False) if b.step > a.step]
        if self.tqdm_rate:
            return (_median(steps) if steps else 1) / self.tqdm_rate, "tqdm"
        return None, None

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


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


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


def _phase_after(message: str) -> str | None:
    """The phase a speculators start/complete message puts the trainer in (``Trainer.train`` logs them)."""
    if match := TRAIN_EPOCH_RE.search(message):
        return "train" if match["what"] == "started" else "between"
    if match := VAL_EPOCH_RE.search(message):
        return "val" if match["what"] == "started" else "between"
    return None


@dataclass
class _Pending:
    """A rich record whose continuation lines may still follow."""

    line: int
    time: float | None
    indent: int
    width: int | None
    """Cells of rich's message column, where the line shows the path column that fixes it."""
    parts: list[str] = field(default_factory=list)

    def message(self) -> str:
        # rich 15.0.0 _wrap.py divide_line wraps at spaces but chops a word longer than the column into lines of
        # exactly the column's width, so such a line continues its word on the next one (a checkpoint path does);
        # a word exactly as wide as the column reads as chopped too, which no message of the formats above has
        joined = ""
        for i, part in enumerate(self.parts):
            chopped = i > 0 and self.width is not None and len(self.parts[i - 1]) == self.width and (
                " " not in self.parts[i - 1])
            joined += part if i == 0 or chopped else " " + part
        return joined


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
        self.interruption: Interruption | None = None
        self.failure: Failure | None = None
        self.launch_end: LaunchEnd | None = None
        self.epoch_number: int | None = None
        self.smoke = False
        self._trained_all = False
        self._validated_all = False
        self._root_cause: dict[str, str] | None = None

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
            path = RICH_PATH_RE.search(head["msg"])
            message = head["msg"][: path.start()] if path else head["msg"]
            # the column ends one cell (the table's padding) before the path's first character
            width = len(head["msg"]) - len(path.group().lstrip()) - 1 if path else None
            self._pending = _Pending(line=line, time=self._rich_clock(head), indent=head.start("msg"), width=width)
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
        if FULL_RUN_STARTS.match(message):
            self._new_run()
            return
        if SMOKE_RUN_STARTS.match(message):
            self.smoke = True
            return
        if self._root_cause is not None and self._failure_field(message, line):
            return
        if ROOT_CAUSE_RE.match(message):
            self._root_cause = {}
            return
        if match := LAUNCH_ENDED_RE.match(message):
            self._launch_ended(match, line)
            return
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
        self._markers(message, line)

    def _failure_field(self, message: str, line: int) -> bool:
        """One line of torchrun's root-cause block; the block ends at its closing rule."""
        if match := FAILURE_FIELD_RE.match(message):
            self._root_cause[match["key"]] = match["value"].strip()
            return True
        if FAILURE_END_RE.match(message) or not message.startswith(("[", " ")):
            cause, self._root_cause = self._root_cause, None
            exitcode = cause.get("exitcode", "").split(" ", 1)[0] or None
            rank = cause.get("rank", "").split(" ", 1)[0] or None
            self.failure = Failure(line=line, step=self.points[-1].step if self.points else None,
                                   exitcode=exitcode, rank=rank, reason=cause.get("traceback"))
            self.finished = False
            return bool(FAILURE_END_RE.match(message))
        return True  # the "[0]:" head of the failure

    def _launch_ended(self, match: re.Match, line: int) -> None:
        end = LaunchEnd(result=match["result"], code=match["code"], status=match["status"], line=line)
        self.launch_end = end
        if end.succeeded:
            # the launch ran to its end: the trainer has nothing left to do, whatever its last logged step was
            if self.interruption is None and self.failure is None:
                self.finished = True
        elif self.interruption is None and self.failure is None and not self.finished:
            reason = f"the launch ended {end.code}/{end.status} ({end.result})"
            self.failure = Failure(line=line, step=self.points[-1].step if self.points else None,
                                   exitcode=end.status, reason=reason)
        elif self.finished:
            # the trainer said it finished and the launch still ended badly (a crash at exit, a failed last save)
            self.finished = False
            self.failure = Failure(line=line, step=self.points[-1].step if self.points else None,
                                   exitcode=end.status, reason=f"the launch ended {end.code}/{end.status} after "
                                                               "the trainer's last epoch")

    def _new_run(self) -> None:
        """The smoke run is over: the monitor shows the full run, so none of the smoke run's points, epoch length,
        epochs or validation carry over, and the full run's first step is a start, not a restart. The rich clock
        goes on (its timestamps omit repeated times)."""
        lines, clock, day = self.lines, self._rich_time, self._rich_day
        self.__init__()
        self.lines, self._rich_time, self._rich_day = lines, clock, day

    def _markers(self, message: str, line: int) -> None:
        if message == "training launch started":
            self.smoke = False
        if START_MARKERS.search(message):
            self._start_marker = True
            self.finished = False
            self._phase = "train"
            self.interruption = None
            self.failure = None
            self.launch_end = None
            self._trained_all = self._validated_all = False
        self.interruption = interruption_after(
            self.interruption, message, line, self.points[-1].step if self.points else None
        )
        if match := TRAIN_EPOCH_RE.search(message):
            self.epochs_total = int(match["of"])
            self.epoch_number = int(match["n"])
            last = match["n"] == match["of"]
            self._trained_all = last and match["what"] == "completed"
            self._validated_all = False
        elif match := VAL_EPOCH_RE.search(message):
            if match["n"] == match["of"] and match["what"] == "completed" and self._trained_all:
                self._validated_all = True
        elif "No val loader, skipping validation epoch" in message and self._trained_all:
            self._validated_all = True
        if self._validated_all and not self.smoke and self.interruption is None and self.failure is None:
            # speculators' run_training has trained and validated its last epoch: only the best-checkpoint link
            # and the process's exit remain
            self.finished = True
        if (phase := _phase_after(message)) is not None:
            self._phase = phase
        if match := FAST_SKIP_RE.search(message):
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
                eal=_first(values, EAL_KEYS),
                full_acc=_first(values, FULL_ACC_KEYS),
            )
        )
        self.metrics = dict(values)
        self.finished = False
        self.interruption = None
        self.failure = None
        self.launch_end = None
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
        phase = self._phase
        interruption = self.interruption
        pending = self._pending
        if pending is not None:
            # a trainer that hangs right after "Validation epoch 1/2 started" writes no next line to complete it
            phase = _phase_after(pending.message()) or phase
            # nor does one that its interrupt save ends
            if START_MARKERS.search(pending.message()):
                interruption = None
            interruption = interruption_after(interruption, pending.message(), pending.line,
                                              points[-1].step if points else None)
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
                        eal=_first(values, EAL_KEYS),
                        full_acc=_first(values, FULL_ACC_KEYS),
                    )
                )
                metrics = dict(values)
                interruption = None
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
            phase=phase,
            interruption=interruption,
            failure=self.failure,
            launch_end=self.launch_end,
            epoch_number=self.epoch_number,
            smoke=self.smoke,
        )


def parse_text(text: str) -> Snapshot:
    """Parse a whole log; an unterminated last line is a write in progress and is left out."""
    parser = LogParser()
    lines = text.split("\n")
    parser.feed(lines[:-1])
    parser.finish()
    return parser.snapshot()
