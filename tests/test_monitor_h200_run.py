"""The monitor's parser on the log of a real training run: speculators 0.7.0's scripts/train.py on one NVIDIA H200
(driver 580.159.04; torch 2.11.0+cu130, transformers 5.14.1 in the trainer's environment), started by the launch
script the trainer plan renders, its smoke run then its full run in one file (tests/fixtures/training/README.md).

Every expected figure is what the trainer wrote: the table is checked against the log's own records (their
`global_step` and `train/loss`), read here with a plain pattern, independently of the parser. The log ends with
speculators' graceful shutdown answering SIGTERM; cuts of it are what the node had written at earlier moments.
"""

from __future__ import annotations

import os
import re

import pytest

from conftest import FIXTURES, PROJECT
from gpuhosts_monitor.app import MonitorConfig, training_status
from gpuhosts_monitor.parse import FULL_RUN_STARTS, LogParser, parse_text
from h200_run_log import LOG, MARKER, cut, text
from monitor_bed import app_for

TRAINING = FIXTURES / "training"




def records(part: str) -> list[tuple[int, float]]:
    """(global_step, train/loss) of each metric record, as rich printed them (a record's lines joined)."""
    joined = re.sub(r"\n {20}", " ", part)
    found = []
    for record in re.findall(r"train/loss=([\d.e+-]+),.*?global_step=(\d+)", joined, re.DOTALL):
        found.append((int(record[1]), float(record[0])))
    return found


def test_the_log_is_the_real_run_described():
    log = text()
    assert log.count(MARKER + "\n") == 1
    smoke, full = log.split(MARKER + "\n")
    assert records(smoke) == [(0, 0.008), (1, 0.008), (2, 0.007)]
    steps = [step for step, _ in records(full)]
    assert steps == list(range(49)), "the full run logged steps 0..48 once each"
    assert "Interrupt checkpoint saved to" in full and "Training epoch 2/2 started" in full


@pytest.mark.parametrize("field, want", [
    ("latest step", 48),
    ("points", 49),
    ("first loss", 0.008),
    ("last loss", 0.004),
    ("steps per epoch", 38),
    ("epochs", 2),
    ("total steps", 76),
    ("restarts", 0),
    ("eal", 0.0),
    ("full_acc", 0.0),
    ("positions", [(i, 0.0) for i in range(1, 16)]),
    ("validation step", 37),
    ("validation loss", 0.004),
])
def test_parser_reads_the_full_run(field, want):
    snap = parse_text(text())
    acceptance = snap.acceptance()
    got = {"latest step": snap.latest.step, "points": len(snap.points), "first loss": snap.points[0].loss,
           "last loss": snap.latest.loss, "steps per epoch": snap.steps_per_epoch, "epochs": snap.epochs_total,
           "total steps": snap.total_steps(), "restarts": len(snap.restarts), "eal": acceptance.eal,
           "full_acc": acceptance.full_acc, "positions": list(acceptance.positions),
           "validation step": snap.val_step, "validation loss": snap.val.get("val/loss_epoch")}[field]
    assert got == want


def test_points_are_the_full_runs_records():
    full = text().split(MARKER + "\n")[1]
    snap = parse_text(text())
    assert [(p.step, p.loss) for p in snap.points] == records(full)


def status_of(log: str) -> dict:
    """training_status of a log read at the moment it was written: the stall rule has no age to judge."""
    return training_status(parse_text(log), MonitorConfig(log=LOG, checkpoints=TRAINING,
                                                          server_url="http://127.0.0.1:9"),
                           os.stat(LOG), now=os.stat(LOG).st_mtime)


def test_eta_is_the_remaining_steps_at_the_logged_rate():
    log = cut("before the last SIGTERM")
    rate, source = parse_text(log).step_rate()
    status = status_of(log)
    assert source == "log-timestamps" and status["steps_per_s"] == pytest.approx(rate)
    assert status["eta_s"] == round((76 - 48) / rate) == 35
    assert status["progress"] == round(48 / 76, 4)


# -- the interruptions ---------------------------------------------------------------------------------------------
# The log holds two SIGTERMs, each answered by speculators 0.7.0's graceful shutdown (train/graceful_shutdown.py):
# the first full launch's, before its first step (the DataLoader, waiting on its workers, turned the interrupt into
# a RuntimeError for a worker the signal killed, which with_graceful_shutdown does not catch: no save follows), and
# the hand-started launch's at step 48, which saved `interrupted/`.

CHECKPOINT = "/data/checkpoints/Qwen3.6-27B-DFlash/interrupted"













def test_the_cuts_are_of_the_real_log():
    log = text()
    assert log.count("Received SIGTERM — interrupting") == 2 and log.count("Training interrupted") == 1
    for name in ("before the last SIGTERM", "the last SIGTERM logged", "its save begun",
                 "the first full launch stopped", "the next launch started"):
        assert log.startswith(cut(name)), name
    assert "Interrupt checkpoint saved" not in cut("its save failed") + cut("its save timed out")


STEPPED = {"signal": "SIGTERM", "line": 1471, "step": 48}
INTERRUPTIONS = [
    pytest.param("whole", "interrupted", {**STEPPED, "save": "saved", "checkpoint": CHECKPOINT,
                                          "summary": f"SIGTERM after step 48; checkpoint saved to {CHECKPOINT}"},
                 id="saved"),
    pytest.param("before the last SIGTERM", "running", None, id="before-it"),
    pytest.param("the last SIGTERM logged", "interrupted", {
        **STEPPED, "save": "pending", "checkpoint": None,
        "summary": "SIGTERM after step 48; no checkpoint save logged"}, id="signal"),
    pytest.param("its save begun", "interrupted", {
        **STEPPED, "save": "saving", "checkpoint": None, "summary": "SIGTERM after step 48; saving a checkpoint"},
        id="saving"),
    pytest.param("its save failed", "interrupted", {
        **STEPPED, "save": "failed", "checkpoint": None,
        "summary": "SIGTERM after step 48; the checkpoint save failed"}, id="failed"),
    pytest.param("its save timed out", "interrupted", {
        **STEPPED, "save": "timed-out", "checkpoint": None,
        "summary": "SIGTERM after step 48; the checkpoint save timed out"}, id="timed-out"),
    pytest.param("the first full launch stopped", "interrupted", {
        "signal": "SIGTERM", "line": 152, "step": None, "save": "pending", "checkpoint": None,
        "summary": "SIGTERM before the first step; no checkpoint save logged"}, id="before-the-first-step"),
    pytest.param("the next launch started", "waiting", None, id="restarted"),
]


@pytest.mark.parametrize("name, state, interruption", INTERRUPTIONS)
def test_an_interrupted_launch_is_neither_running_nor_stalled(name, state, interruption):
    status = status_of(cut(name))
    assert (status["state"], status["interruption"]) == (state, interruption)
    if interruption is not None:
        assert status["eta_s"] is None, "an interrupted run arrives nowhere"


@pytest.mark.parametrize("name, state, interruption", INTERRUPTIONS)
def test_an_interruption_counts_while_its_record_is_still_open(name, state, interruption):
    """Fed line by line and asked before the end of input, as the follower asks: the record last written may
    still grow, and the trainer that wrote it is gone."""
    parser = LogParser()
    parser.feed(cut(name).split("\n")[:-1])
    got = parser.snapshot().interruption
    want = (interruption["save"], interruption["checkpoint"], interruption["step"]) if interruption else None
    assert ((got.save, got.checkpoint, got.step) if got else None) == want


def smoke_then_full(cut_in_full: int) -> str:
    """The log as the node writes it when nothing interrupts: the smoke run, its marker, then the full run's own
    launch (the fixture's first full launch, stopped at its start, left out) up to `cut_in_full` lines."""
    lines = text().split("\n")
    marker = lines.index(MARKER)
    relaunch = next(i for i in range(marker + 1, len(lines)) if lines[i].startswith("hidden-state check: passed"))
    return "\n".join(lines[: marker + 1] + lines[relaunch + 1: relaunch + 1 + cut_in_full]) + "\n"


@pytest.mark.parametrize("cut, latest, total", [
    # before the full run's first epoch bar: its length is not known yet, and never the smoke run's 3 steps
    (900, 35, None),
    # after it: 38 steps per epoch, 2 epochs
    (1000, 38, 76),
])
def test_the_full_run_after_the_smoke_run_is_a_new_run(cut, latest, total):
    snap = parse_text(smoke_then_full(cut))
    assert snap.latest.step == latest
    assert snap.restarts == [], "the full run's first step is its start, not a resume of the smoke run"
    assert [p.step for p in snap.points] == list(range(latest + 1))
    assert snap.total_steps() == total
    assert snap.epochs_total == 2


def test_the_launch_script_prints_the_marker_the_parser_reads():
    script = (PROJECT / "tests/golden/trainer/opt/gpuhosts/training/train_dflash_qwen36.sh").read_text()
    echoed = re.findall(r'echo "([^"$]*)"', script)
    assert [line for line in echoed if FULL_RUN_STARTS.match(line)] == [MARKER]


@pytest.mark.parametrize("name, badge, says", [
    pytest.param("whole", "interrupted", f"SIGTERM after step 48; checkpoint saved to {CHECKPOINT}", id="interrupted"),
    pytest.param("before the last SIGTERM", "running", "", id="running"),
])
def test_the_page_says_the_run_was_interrupted(tmp_path, health_server, name, badge, says):
    log = tmp_path / "train.log"
    log.write_text(cut(name), encoding="utf-8", newline="")
    page = app_for(tmp_path, log, health_server.url).test_client().get("/").get_data(as_text=True)
    assert f'<span id="state" class="badge {badge}">{badge}</span>' in page
    assert f'<span id="interruption" class="dim">{says}</span>' in page
