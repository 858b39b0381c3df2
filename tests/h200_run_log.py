"""The speculators 0.7.0 log captured from a smoke-then-full run on an H200 node, and the parts of it the node had
written at given moments (`cut`), or with another outcome of its interrupt save, for the monitor's cases.
"""

from __future__ import annotations
from monitor_bed import TRAINING



LOG = TRAINING / "speculators-0.7.0-h200-smoke-then-full.log"


MARKER = "smoke run passed: the full run starts"


def text() -> str:
    # newline="": the log holds carriage returns (bars redrawn), which are not line ends
    with open(LOG, encoding="utf-8", newline="") as handle:
        return handle.read()


# The two outcomes of a save the run did not have, in place of its "Interrupt checkpoint saved to" record: the words
# are graceful_shutdown.py's at v0.7.0 (with_graceful_shutdown: logger.exception at line 145, the watchdog's
# logger.error at line 128, timeout 120 s), laid out as rich laid out the records around them (80 columns, the
# message column 35 cells wide beside `graceful_shutdown.py:NNN`); logger.exception's traceback is RichHandler's
# default, the formatted exception as message lines.
SAVE_FAILED = """\
           ERROR    Failed to save interrupt checkpoint graceful_shutdown.py:145
                    Traceback (most recent call last):
                      File "/opt/gpuhosts/speculators/ve
                    nv/lib/python3.12/site-packages/spec
                    ulators/train/trainer.py", line 612,
                    in maybe_save_checkpoint
                    OSError: [Errno 28] No space left on
                    device
"""


SAVE_TIMED_OUT = """\
           ERROR    Interrupt checkpoint save timed out graceful_shutdown.py:128
                    after 120s — forcing exit
"""


def lines() -> list[str]:
    return text().split("\n")


def record_end(log: list[str], start: int) -> int:
    """Index after the rich record whose first line is log[start] (its continuation lines are indented 20)."""
    end = start + 1
    while end < len(log) and log[end].startswith(" " * 20):
        end += 1
    return end


def last(log: list[str], words: str) -> int:
    return max(i for i, line in enumerate(log) if words in line)


def first_after(log: list[str], words: str, start: int) -> int:
    return next(i for i in range(start, len(log)) if words in log[i])


def cut(name: str) -> str:
    """The log, or the part of it the node had written at one moment, or with another save outcome."""
    log = lines()
    second = last(log, "Received SIGTERM")
    saved = last(log, "Interrupt checkpoint saved to")
    first = first_after(log, "Received SIGTERM", log.index(MARKER))
    relaunch = first_after(log, "No previous training checkpoint found", first)
    keep = {
        "whole": log,
        "before the last SIGTERM": log[: last(log, "Received 15 death signal")],
        "the last SIGTERM logged": log[: record_end(log, second)],
        "its save begun": log[: record_end(log, last(log, "Training interrupted"))],
        "its save failed": log[:saved] + SAVE_FAILED.splitlines() + log[record_end(log, saved):],
        "its save timed out": log[:saved] + SAVE_TIMED_OUT.splitlines() + log[record_end(log, saved):],
        "the first full launch stopped": log[:relaunch],
        "the next launch started": log[: record_end(log, relaunch)],
    }[name]
    return "\n".join(keep).rstrip("\n") + "\n"
