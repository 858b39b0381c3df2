"""The training monitor: its log parser over captured trainer output, the Flask app, the CLI, the page in Chromium."""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import PROJECT
from gpuhosts_monitor.cli import build_parser, config_from_args, main
from gpuhosts_monitor.parse import LogParser, Point, downsample, key_values, parse_text
from gpuhosts_monitor.sources import LogFollower, newest_checkpoint, parse_gpus, query_gpus
from sshhost import free_port
from monitor_bed import HealthServer, SAFETENSORS, SMI, TOKEN, TRAINING, app_for, fake_nvidia_smi, make_checkpoints, run_chromium



def fixture_text(name: str) -> str:
    return (TRAINING / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------------
# parser over the captured logs

# (step, loss, lr, epoch) of points that must be on the curve; after a resume, the resumed run's values
FIXTURE_CASES = [
    pytest.param(
        "speculators-0.9.0-fresh.log",
        {
            "steps": list(range(39)),
            "at": {0: (8.0, 3.00e-04, 0), 12: (4.889, 2.25e-04, 0), 24: (3.485, 1.50e-04, 1), 38: (2.859, 6.25e-05, 1)},
            "tokens_per_s": 33400.0,
            "epochs_total": 2,
            "steps_per_epoch": 24,
            "total": 48,
            "restarts": [],
            # 38 steps between 10:00:12 and 10:01:38, the epoch-end checkpoint and validation included
            "rate": (38 / 86, "log-timestamps"),
            "val": ("val/loss_epoch", 3.685, 23),
            "finished": False,
            "metrics": {"train/eal": 3.276, "train/position_15_acc": 0.284, "profile/memory_mb/opt": 23600.0},
        },
        id="speculators-0.9.0-fresh",
    ),
    pytest.param(
        "speculators-0.9.0-resume-midepoch.log",
        {
            "steps": list(range(30)),
            "at": {11: (5.040, 2.31e-04, 0), 12: (4.876, 2.25e-04, 0), 16: (4.300, 2.00e-04, 0),
                   29: (3.164, 1.19e-04, 1)},
            "tokens_per_s": 33400.0,
            "epochs_total": 2,
            "steps_per_epoch": 24,
            "total": 48,
            "restarts": [(16, 12, 12)],
            # only the resumed launch: steps 12…29 between 10:01:34 and 10:02:18
            "rate": (17 / 44, "log-timestamps"),
            "val": ("val/loss_epoch", 3.672, 23),
            "finished": False,
            "metrics": {"train/error_records": 0.0},
        },
        id="speculators-0.9.0-resume-midepoch",
    ),
    pytest.param(
        "speculators-0.5.0-resume-epoch.log",
        {
            "steps": list(range(46)),
            "at": {19: (3.985, 4.10e-04, 0), 20: (3.901, 4.00e-04, 1), 26: (3.407, 3.40e-04, 1),
                   39: (2.843, 2.10e-04, 1), 40: (2.805, 2.00e-04, 2), 45: (2.700, 1.50e-04, 2)},
            "tokens_per_s": None,
            "epochs_total": 3,
            "steps_per_epoch": 20,
            "total": 60,
            # 0.5.0 prints global_step=0 again in the resumed epoch 1
            "restarts": [(26, 20, 0)],
            "rate": (25 / 85, "log-timestamps"),
            "val": ("val/loss_epoch", 3.005, 39),
            "finished": False,
            "metrics": {"train/position 14 acc": 0.350, "train/position 15 acc": 0.326},
        },
        id="speculators-0.5.0-resume-epoch",
    ),
    pytest.param(
        "hf-trainer-5.log",
        {
            "steps": list(range(5, 61, 5)),
            "at": {5: (3.356, 4.667e-05, 0.25), 20: (2.248, 3.417e-05, 1), 60: (1.172, 8.333e-07, 3)},
            "tokens_per_s": None,
            "epochs_total": None,
            "steps_per_epoch": None,
            "total": 60,
            "restarts": [],
            "rate": (1.25, "tqdm"),
            "val": ("eval_loss", 1.234, 40),
            "finished": True,
            "metrics": {"grad_norm": 1.017},
        },
        id="hf-trainer-5",
    ),
]


@pytest.mark.parametrize("name, want", FIXTURE_CASES)
def test_parser_reads_fixture(name, want):
    snap = parse_text(fixture_text(name))
    assert [p.step for p in snap.points] == want["steps"]
    by_step = {p.step: p for p in snap.points}
    for step, (loss, lr, epoch) in want["at"].items():
        point = by_step[step]
        assert (point.loss, point.lr, point.epoch) == (pytest.approx(loss), pytest.approx(lr), epoch), step
    assert snap.latest.tokens_per_s == want["tokens_per_s"]
    assert snap.epochs_total == want["epochs_total"]
    assert snap.steps_per_epoch == want["steps_per_epoch"]
    assert snap.total_steps() == want["total"]
    assert [(r.from_step, r.at_step, r.raw_step) for r in snap.restarts] == want["restarts"]
    rate, source = snap.step_rate()
    assert (rate, source) == (pytest.approx(want["rate"][0]), want["rate"][1])
    key, value, val_step = want["val"]
    assert (snap.val[key], snap.val_step) == (pytest.approx(value), val_step)
    assert snap.finished is want["finished"]
    for key, value in want["metrics"].items():
        assert snap.metrics[key] == pytest.approx(value), key


def test_fresh_fixture_half_written_last_record_is_left_out():
    text = fixture_text("speculators-0.9.0-fresh.log")
    assert not text.endswith("\n") and text.rsplit("\n", 1)[1].startswith("[10:01:42] INFO     train/loss=2.441")
    assert parse_text(text).latest.step == 38
    # once the rest of the record arrives, it counts
    rest = "\n                    epoch=1, lr=5.62e-05, global_step=39\n"
    latest = parse_text(text + rest).latest
    assert (latest.step, latest.loss, latest.lr) == (39, 2.441, 5.62e-05)


def test_resumed_points_replace_the_lost_ones_whatever_the_chunking(tmp_path):
    """The follower reads whatever the trainer has appended, in pieces that split lines and records anywhere."""
    text = fixture_text("speculators-0.9.0-resume-midepoch.log")
    log = tmp_path / "train.log"
    log.write_text("")
    follower = LogFollower(log)
    data = text.encode()
    cuts = [0, 1, 77, 5000, 5001, 40_000, 61_234, len(data) - 3, len(data)]
    for start, end in zip(cuts, cuts[1:], strict=False):
        with log.open("ab") as fh:
            fh.write(data[start:end])
        follower.refresh()
    snap, tail, _ = follower.refresh()
    whole = parse_text(text)
    assert [(p.step, p.loss) for p in snap.points] == [(p.step, p.loss) for p in whole.points]
    assert len(tail) == 50 and tail[-1].startswith("Epoch 1  21%")


def test_follower_starts_over_when_the_log_is_replaced(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(fixture_text("speculators-0.5.0-resume-epoch.log"))
    follower = LogFollower(log)
    assert follower.refresh()[0].latest.step == 45
    log.unlink()
    assert follower.refresh()[0].latest is None
    log.write_text("step=3 loss=1.5 lr=0.1\n")
    snap, tail, _ = follower.refresh()
    assert [(p.step, p.loss) for p in snap.points] == [(3, 1.5)] and tail == ["step=3 loss=1.5 lr=0.1"]


def test_open_rich_record_counts_before_the_next_line_arrives():
    """rich writes a wrapped record in one go; the parser cannot know it is complete until another line starts."""
    lines = fixture_text("speculators-0.9.0-fresh.log").split("\n")
    end = next(i for i, line in enumerate(lines) if "global_step=5 " in line or line.endswith("global_step=5"))
    parser = LogParser()
    parser.feed(lines[: end + 1])
    assert parser.snapshot().latest.step == 5
    assert [p.step for p in parser.points] == [0, 1, 2, 3, 4]


RICH = "[10:00:{s:02d}] INFO     {msg}   trainer.py:191"
FORMS = [
    pytest.param(
        # speculators before 0.5.0 (its examples/training/README.md): no global_step, one line on a wide console
        "\n".join(
            RICH.format(s=s, msg=f"train/loss_0=1.980, train/full_acc_0=0.029, train/loss={loss}, epoch=0, lr={lr}")
            for s, loss, lr in [(13, "5.965", "2.47e-05"), (15, "5.001", "2.50e-05")]
        ),
        [(0, 5.965, 2.47e-05, 0), (1, 5.001, 2.5e-05, 0)],
        id="speculators-pre-0.5-no-step",
    ),
    pytest.param(
        "INFO:speculators.metrics:train/loss=2.500, epoch=0, lr=1.00e-04, global_step=7",
        [(7, 2.5, 1e-4, 0)],
        id="speculators-plain-logging",
    ),
    pytest.param(
        # --optimizer muon: one lr per optimizer
        "train/loss=2.500, epoch=1, lr/Muon=2.00e-02, lr/AdamW=1.00e-04, global_step=9",
        [(9, 2.5, 0.02, 1)],
        id="speculators-muon-lrs",
    ),
    pytest.param(
        # transformers 4.x printed the floats themselves; the step comes from the bar drawn before
        "  1%|          | 10/1000 [00:05<08:00,  2.06it/s]\r\n"
        "{'loss': 2.3456, 'grad_norm': 1.5, 'learning_rate': 4.9e-05, 'epoch': 0.01}",
        [(10, 2.3456, 4.9e-05, 0.01)],
        id="hf-trainer-4-floats",
    ),
    pytest.param(
        "2026-05-01 10:00:00,000 INFO train: step=100 loss=2.31 lr=1e-4 tokens/s=12000\n"
        "2026-05-01 10:00:10,000 INFO train: step=110 loss=2.29 lr=1e-4 tokens/s=12100",
        [(100, 2.31, 1e-4, None), (110, 2.29, 1e-4, None)],
        id="key-value-asctime",
    ),
    pytest.param(
        "\x1b[32m[rank0]: step=4 loss=0.75 learning_rate=3e-05 epoch=0.5\x1b[0m",
        [(4, 0.75, 3e-05, 0.5)],
        id="ansi-colour-rank-prefix",
    ),
    pytest.param(
        "step=10 loss=3.0 lr=1e-3\nstep=20 loss=2.0 lr=1e-3\nstep=5 loss=2.9 lr=1e-3\nstep=15 loss=2.5 lr=1e-3",
        [(5, 2.9, 1e-3, None), (15, 2.5, 1e-3, None)],
        id="restart-from-scratch-replaces-curve",
    ),
    pytest.param(
        # no step printed: only the launch script's line tells the run started again
        "loss=3.0 lr=1e-3\nloss=2.0 lr=1e-3\nresuming from /srv/train/checkpoints/0\nloss=2.5 lr=1e-3",
        [(0, 2.5, 1e-3, None)],
        id="restart-seen-from-launch-line",
    ),
    pytest.param(
        "\n".join(
            [
                "Traceback (most recent call last):",
                '  File "train.py", line 3, in <module>',
                "ValueError: loss=bad lr=worse",
                "loss went up again",
                "step=abc lr=",
                "{'loss': float('nan'), 'epoch': 1}",
                "{'loss': 2.0",
                "Loading checkpoint shards: 100% 4/4 [00:01<00:00, 2.9it/s]",
                "\x00\x01\xff\ufffd binary junk = = =",
                "W0501 10:00:00.000000 4711 torch/distributed/run.py:792] *****",
                "epoch=3 global_step=12",
                "                    continuation without a head=1.0",
            ]
        ),
        [],
        id="garbage-only",
    ),
]


@pytest.mark.parametrize("text, want", FORMS)
def test_parser_forms(text, want):
    snap = parse_text(text + "\n")
    assert [(p.step, p.loss, p.lr, p.epoch) for p in snap.points] == [
        (step, pytest.approx(loss), pytest.approx(lr), epoch) for step, loss, lr, epoch in want
    ]


@pytest.mark.parametrize(
    "line, rate, per_epoch, total",
    [
        ("Epoch 0:  5%|▌         | 5/100 [00:12<03:48,  2.40s/it]", 1 / 2.4, 100, None),
        ("  8%|▊         | 5/60 [00:03<00:43,  1.25it/s]", 1.25, None, 60),
        ("Epoch 1 100% ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 24/24  [ 0:00:48 < 0:00:00 , 2 it/s ]", 2.0, 24, None),
        ("Epoch 1  21% ━━━━━━                         5/24  [ 0:00:12 < -:--:-- , ? it/s ]", None, 24, None),
        ("  0%|          | 0/60 [00:00<?, ?it/s]", None, None, 60),
        ("Training: 45%|████▌     | 450/1000 [05:00<06:00,  1.50it/s]", 1.5, None, 1000),
        ("Loading checkpoint shards: 100%|██████████| 4/4 [00:01<00:00,  2.90it/s]", None, None, None),
        ("Map: 100%|██████████| 1000/1000 [00:00<00:00, 5000.00 examples/s]", None, None, None),
        # transformers' evaluation bar, drawn after the training bar, is not the run's length
        ("  8%|▊         | 5/60 [00:03<00:43,  1.25it/s]\r 50%|█████     | 8/16 [00:01<00:01,  6.50it/s]",
         1.25, None, 60),
    ],
)
def test_progress_bars(line, rate, per_epoch, total):
    snap = parse_text(line + "\n")
    assert snap.tqdm_rate == (pytest.approx(rate) if rate else None)
    assert (snap.steps_per_epoch, snap.tqdm_total) == (per_epoch, total)


def test_validation_bar_does_not_count_as_an_epoch():
    text = (
        "[10:00:00] INFO     Validation epoch 1/2 started    trainer.py:754\n"
        "Epoch 0 100% ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 4/4  [ 0:00:06 < 0:00:00 , ? it/s ]\n"
    )
    assert parse_text(text).steps_per_epoch is None


def test_key_values_keep_spaces_in_comma_separated_keys():
    assert key_values("train/position 1 acc=0.500, epoch=0, lr=1.00e-04, profile=None") == {
        "train/position 1 acc": 0.5,
        "epoch": 0.0,
        "lr": 1e-4,
    }


def test_downsample_keeps_ends_and_limit():
    points = [Point(i, 1.0 / (i + 1), 1e-4, 0, None, None, i) for i in range(3001)]
    picked = downsample(points, 500)
    assert len(picked) == 500 and picked[0].step == 0 and picked[-1].step == 3000
    assert [p.step for p in picked] == sorted({p.step for p in picked})
    assert downsample(points[:10], 500) == points[:10]


# ---------------------------------------------------------------------------------------------------------------
# sources: nvidia-smi, server health, checkpoints




def eight_h200(tmp_path: Path) -> Path:
    busy = (SMI / "query-gpu-monitor-busy.csv").read_text().strip()
    idle = (SMI / "query-gpu-monitor-idle.csv").read_text().strip()
    lines = [re.sub(r"^0,", f"{i},", busy if i < 4 else idle) for i in range(8)]
    path = tmp_path / "eight.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_gpus_from_real_h200_output(tmp_path):
    gpus, error = query_gpus(str(fake_nvidia_smi(tmp_path, SMI / "query-gpu-monitor-busy.csv")))
    assert error is None
    assert [(g.index, g.name, g.utilization_pct, g.memory_used_mib, g.memory_total_mib) for g in gpus] == [
        (0, "NVIDIA H200", 100.0, 39159.0, 143771.0)
    ]


@pytest.mark.parametrize(
    "output, rc, message, want_error",
    [
        (None, 6, "No devices were found", "exited 6: No devices were found"),
        (None, 0, "", "listed no GPU"),
    ],
)
def test_gpu_errors(tmp_path, output, rc, message, want_error):
    gpus, error = query_gpus(str(fake_nvidia_smi(tmp_path, output, rc, message)))
    assert gpus == [] and want_error in error


def test_gpus_missing_binary(tmp_path):
    assert query_gpus(str(tmp_path / "absent")) == ([], f"{tmp_path / 'absent'} not found")


def test_gpu_readings_not_available():
    gpus = parse_gpus("0, NVIDIA H200, [N/A], 1024, 143771\n1, NVIDIA H200, [Not Supported], [N/A], 143771\n")
    assert [(g.utilization_pct, g.memory_used_mib) for g in gpus] == [(None, 1024.0), (None, None)]









CHECKPOINT_CASES = [
    pytest.param(
        {
            "0": {"age": 300, "files": {**SAFETENSORS, "training_state.json": '{"epoch": 0, "local_step": 0, '
                                                                                '"global_step": 24}'}},
            "1": {"age": 100, "files": {**SAFETENSORS, "training_state.json": '{"epoch": 1, "local_step": 12, '
                                                                                '"global_step": 36}'}},
            "checkpoint_best": {"link": "0"},
            "epoch1_step12": {"link": "1"},
            "train_command.txt": {"age": 0},
        },
        ("1", 36, 1, 2),
        id="speculators-epoch-dirs",
    ),
    pytest.param(
        {
            "checkpoint-500": {"age": 30, "files": {"trainer_state.json": '{"global_step": 500, "epoch": 0.5}'}},
            "checkpoint-1500": {"age": 200, "files": SAFETENSORS},
            "checkpoint-1000": {"age": 10, "files": SAFETENSORS},
        },
        ("checkpoint-1500", 1500, None, 3),
        id="hf-step-number-beats-mtime",
    ),
    pytest.param(
        {"epoch_3": {"age": 5, "files": SAFETENSORS}, "epoch_10": {"age": 50, "files": SAFETENSORS}},
        ("epoch_10", None, 10, 2),
        id="epoch-numbers-not-lexicographic",
    ),
    pytest.param(
        {
            "0": {"age": 100, "files": SAFETENSORS},
            "interrupted": {"age": 10, "files": SAFETENSORS},
            "logs": {"age": 1, "files": {"events.out": "x"}},
        },
        ("interrupted", None, None, 2),
        id="speculators-interrupted-newer",
    ),
    pytest.param(
        {"final": {"age": 100, "files": SAFETENSORS}, "best": {"age": 20, "files": {"config.json": "{}"}}},
        ("best", None, None, 2),
        id="unnumbered-by-mtime",
    ),
    pytest.param({}, (None, None, None, 0), id="empty"),
]


@pytest.mark.parametrize("layout, want", CHECKPOINT_CASES)
def test_newest_checkpoint(tmp_path, layout, want):
    root = make_checkpoints(tmp_path / "ckpt", {k: v for k, v in layout.items() if k != "train_command.txt"})
    if "train_command.txt" in layout:
        (root / "train_command.txt").write_text("torchrun …")
    checkpoint, count, error = newest_checkpoint(root)
    got = (checkpoint.name, checkpoint.step, checkpoint.epoch) if checkpoint else (None, None, None)
    assert (*got, count) == want and error is None


def test_checkpoint_dir_missing(tmp_path):
    assert newest_checkpoint(tmp_path / "nope") == (None, 0, f"{tmp_path / 'nope'} does not exist")


# ---------------------------------------------------------------------------------------------------------------
# the Flask app








def test_status_numbers_from_fixture(tmp_path, health_server):
    client = app_for(tmp_path, TRAINING / "speculators-0.9.0-fresh.log", health_server.url).test_client()
    response = client.get("/api/status")
    assert response.status_code == 200
    s = response.get_json()
    t = s["training"]
    assert {k: t[k] for k in ("state", "step", "total_steps", "total_steps_source", "epoch", "epochs_total")} == {
        "state": "running", "step": 38, "total_steps": 48, "total_steps_source": "log", "epoch": 2,
        "epochs_total": 2,
    }
    assert (t["loss"], t["lr"], t["tokens_per_s"]) == (2.859, 6.25e-05, 33400.0)
    assert t["steps_per_s"] == round(38 / 86, 6) and t["rate_source"] == "log-timestamps"
    assert t["eta_s"] == round(10 * 86 / 38)
    assert t["progress"] == round(38 / 48, 4)
    assert t["validation"] == {"step": 23, "metrics": {"val/loss_epoch": 3.685, "val/kl_div_epoch": 3.685,
                                                       "val/full_acc_epoch": 0.41, "val/eal_epoch": 2.875}}
    assert s["curves"]["points_total"] == 39 and len(s["curves"]["loss"]) == 39
    assert s["curves"]["loss"][0] == [0, 8.0] and s["curves"]["loss"][-1] == [38, 2.859]
    assert s["curves"]["lr"][0] == [0, 3e-4] and s["curves"]["lr"][-1] == [38, 6.25e-05]
    assert s["gpus"] == [{"index": 0, "name": "NVIDIA H200", "utilization_pct": 0.0, "memory_used_mib": 0.0,
                          "memory_total_mib": 143771.0}]
    assert s["gpu_error"] is None
    assert s["server"]["state"] == "up" and s["server"]["status_code"] == 200
    assert health_server.paths == ["/health"]
    assert s["checkpoint"]["name"] == "0" and s["checkpoint_count"] == 1
    assert len(s["log"]["tail"]) == 50 and s["log"]["tail"][-1].startswith("[10:01:42] INFO     train/loss=2.441")


def test_status_after_resume_and_cli_total(tmp_path, health_server):
    app = app_for(tmp_path, TRAINING / "speculators-0.5.0-resume-epoch.log", health_server.url, total_steps=600)
    t = app.test_client().get("/api/status").get_json()["training"]
    assert (t["step"], t["epoch"], t["loss"], t["total_steps"], t["total_steps_source"]) == (45, 3, 2.7, 600, "cli")
    # "Training epoch 3/3" in the trainer's words; its records carry the epoch 0-based
    assert t["epoch_logged"] == 2
    assert t["restarts"] == [{"line": 110, "from_step": 26, "at_step": 20, "raw_step": 0}]
    assert t["eta_s"] == round((600 - 45) / (25 / 85))


def test_status_of_finished_hf_run(tmp_path, health_server):
    s = app_for(tmp_path, TRAINING / "hf-trainer-5.log", health_server.url).test_client().get("/api/status")
    t = s.get_json()["training"]
    assert (t["state"], t["step"], t["total_steps"], t["steps_per_s"], t["rate_source"], t["eta_s"]) == (
        "finished", 60, 60, 1.25, "tqdm", 0)


def test_curves_are_downsampled(tmp_path, health_server):
    log = tmp_path / "long.log"
    log.write_text("".join(f"step={i} loss={5 - i / 1000:.4f} lr=1e-4\n" for i in range(1, 4001)))
    curves = app_for(tmp_path, log, health_server.url).test_client().get("/api/status").get_json()["curves"]
    assert curves["points_total"] == 4000
    assert len(curves["loss"]) == 500 and len(curves["lr"]) == 500
    assert curves["loss"][0] == [1, 4.999] and curves["loss"][-1] == [4000, 1.0]


@pytest.mark.parametrize(
    "setup, want",
    [
        ("503", {"state": "down", "status_code": 503, "error": None}),
        ("closed", {"state": "down", "status_code": None}),
        ("silent", {"state": "down", "status_code": None, "error": "timed out"}),
    ],
)
def test_server_down(tmp_path, setup, want):
    server, silent = None, None
    if setup == "closed":
        url = f"http://127.0.0.1:{free_port()}"
    elif setup == "silent":
        # still loading: the port accepts connections but nothing answers
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    else:
        server = HealthServer(code=int(setup))
        url = server.url
    try:
        app = app_for(tmp_path, tmp_path / "none.log", url, health_timeout_s=0.3)
        got = app.test_client().get("/api/status").get_json()["server"]
    finally:
        if server:
            server.close()
        if silent:
            silent.close()
    assert {k: got[k] for k in want} == want
    assert got["url"] == url + "/health"
    assert got["error"] or got["status_code"]


def test_diverged_loss_is_reported_not_plotted(tmp_path, health_server):
    log = tmp_path / "train.log"
    log.write_text("step=1 loss=2.5 lr=1e-4\nstep=2 loss=nan lr=1e-4\n")
    s = app_for(tmp_path, log, health_server.url).test_client().get("/api/status").get_json()
    assert (s["training"]["step"], s["training"]["loss"], s["training"]["loss_finite"]) == (2, None, False)
    assert s["curves"]["loss"] == [[1, 2.5]] and s["curves"]["points_total"] == 2


def test_missing_log_and_gpu_listing(tmp_path, health_server):
    app = app_for(tmp_path, tmp_path / "not-yet.log", health_server.url, nvidia_smi=fake_nvidia_smi(
        tmp_path, eight_h200(tmp_path)), checkpoints=tmp_path / "no-checkpoints-yet")
    s = app.test_client().get("/api/status").get_json()
    assert s["checkpoint"] is None and "does not exist" in s["checkpoint_error"]
    page = app.test_client().get("/").get_data(as_text=True)
    assert "no-log" in page and "does not exist" in page and page.count("<td>NVIDIA H200</td>") == 8
    assert s["training"]["state"] == "no-log" and s["log"]["exists"] is False and s["log"]["tail"] == []
    assert [(g["index"], g["utilization_pct"], g["memory_used_mib"]) for g in s["gpus"]] == [
        (i, 100.0 if i < 4 else 0.0, 39159.0 if i < 4 else 0.0) for i in range(8)
    ]


def test_log_tail_is_escaped_on_the_page(tmp_path, health_server):
    log = tmp_path / "train.log"
    log.write_text("step=1 loss=2.0 lr=1e-4\n<script>alert('tail')</script>\n<img src=x onerror=alert(2)>\n")
    client = app_for(tmp_path, log, health_server.url).test_client()
    html = client.get("/").get_data(as_text=True)
    assert "&lt;script&gt;alert(&#39;tail&#39;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<script>alert" not in html and "<img" not in html
    assert client.get("/api/status").get_json()["log"]["tail"][-1] == "<img src=x onerror=alert(2)>"


def test_page_loads_nothing_from_elsewhere(tmp_path, health_server):
    response = app_for(tmp_path, TRAINING / "hf-trainer-5.log", health_server.url).test_client().get("/")
    html = response.get_data(as_text=True)
    for construct in ("src=", "href=", "url(", "@import", "<link", "<iframe", "<img", "srcset"):
        assert construct not in html, construct
    # the only address on the page is the health URL, shown as text
    assert set(re.findall(r"https?://[^\s<\"']+", html)) == {health_server.url + "/health"}
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert 'id="loss-plot"' in html


def test_healthz(tmp_path, health_server):
    response = app_for(tmp_path, tmp_path / "x.log", health_server.url).test_client().get("/healthz")
    assert (response.status_code, response.get_data(as_text=True)) == (200, "ok\n")


@pytest.mark.parametrize("path", ["/", "/api/status", "/healthz"])
@pytest.mark.parametrize(
    "how, code",
    [
        ({}, 401),
        ({"headers": {"Authorization": "Bearer wrong"}}, 401),
        ({"query_string": {"token": TOKEN[:-1]}}, 401),
        ({"headers": {"Authorization": f"Basic {TOKEN}"}}, 401),
        ({"headers": {"Authorization": f"Bearer {TOKEN}"}}, 200),
        ({"headers": {"Authorization": f"bearer {TOKEN}"}}, 200),
        ({"query_string": {"token": TOKEN}}, 200),
    ],
    ids=["none", "wrong", "prefix", "basic", "bearer", "bearer-lower", "query"],
)
def test_token_required(tmp_path, health_server, path, how, code):
    log = tmp_path / "train.log"
    log.write_text("step=1 loss=2.0 lr=1e-4\n")
    client = app_for(tmp_path, log, health_server.url, token=TOKEN).test_client()
    response = client.get(path, **how)
    assert response.status_code == code
    assert TOKEN not in response.get_data(as_text=True)
    assert all(TOKEN not in value for _, value in response.headers.items())


# ---------------------------------------------------------------------------------------------------------------
# the command line


def cli_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--log", str(tmp_path / "t.log"), "--checkpoints", str(tmp_path), "--server-url",
            "http://127.0.0.1:8000", *extra]


def token_file(tmp_path: Path, mode: int, content: str = TOKEN + "\n") -> Path:
    path = tmp_path / "token"
    path.write_text(content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--bind", "0.0.0.0"], "--bind 0.0.0.0 would expose the monitor beyond this host; give --token-file"),
        (["--bind", "192.0.2.10"], "--bind 192.0.2.10 would expose"),
        (["--bind", "localhost"], "--bind localhost would expose"),
        (["--bind", "0.0.0.0", "--token-file", "{dir}/absent"], "No such file"),
        (["--bind", "0.0.0.0", "--token-file", "{token644}"], "lets others read it; chmod 0600"),
        (["--bind", "0.0.0.0", "--token-file", "{empty}"], "empty"),
        (["--server-url", "127.0.0.1:8000"], "expected http://host:port"),
        (["--total-steps", "0"], "must be positive"),
    ],
    ids=["any", "lan", "hostname", "no-file", "group-readable", "empty-token", "url", "total"],
)
def test_cli_refuses(tmp_path, capsys, extra, message):
    names = {"dir": str(tmp_path), "token644": str(token_file(tmp_path, 0o644))}
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    names["empty"] = str(empty)
    assert main(cli_args(tmp_path, *[arg.format(**names) for arg in extra])) == 2
    err = capsys.readouterr().err
    assert message in err and TOKEN not in err


@pytest.mark.parametrize("bind", ["127.0.0.1", "::1", "127.0.0.2"])
def test_loopback_needs_no_token(tmp_path, bind):
    config = config_from_args(build_parser().parse_args(cli_args(tmp_path, "--bind", bind)))
    assert config.bind == bind and config.token is None


def test_exposed_bind_with_private_token_file(tmp_path):
    args = build_parser().parse_args(cli_args(tmp_path, "--bind", "0.0.0.0", "--token-file",
                                              str(token_file(tmp_path, 0o600)), "--total-steps", "9000"))
    config = config_from_args(args)
    assert (config.bind, config.token, config.total_steps, config.port) == ("0.0.0.0", TOKEN, 9000, 8686)


def test_entry_point_refuses_exposed_bind(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gpuhosts_monitor", *cli_args(tmp_path, "--bind", "0.0.0.0")],
        capture_output=True, text=True, cwd=PROJECT, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "would expose the monitor beyond this host" in done.stderr


# ---------------------------------------------------------------------------------------------------------------
# the page in a real browser




def png_facts(path: Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct byte values of the decoded image data."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


@pytest.fixture
def served_monitor(tmp_path, health_server):
    """`python -m gpuhosts_monitor` on a free port, with a token, as the service runs it."""
    log = tmp_path / "train.log"
    log.write_text(
        fixture_text("speculators-0.9.0-fresh.log")
        + "\n<script>document.title='pwned'</script>\n<img src=x onerror=\"document.title='pwned'\">\n"
    )
    smi = fake_nvidia_smi(tmp_path, eight_h200(tmp_path))
    checkpoints = make_checkpoints(tmp_path / "ckpt", {"0": {"age": 60, "files": SAFETENSORS}})
    stderr = tmp_path / "monitor.err"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuhosts_monitor", "--log", str(log), "--checkpoints", str(checkpoints),
             "--server-url", health_server.url, "--port", "0", "--nvidia-smi", str(smi),
             "--token-file", str(token_file(tmp_path, 0o600)), "--title", "kpro5 DFlash drafter"],
            stdout=subprocess.DEVNULL, stderr=err, cwd=PROJECT,
        )
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None and time.monotonic() < deadline:
            if match := re.search(r"on http://127\.0\.0\.1:(\d+)/", stderr.read_text()):
                port = int(match[1])
            elif proc.poll() is not None:
                pytest.fail(f"monitor exited: {stderr.read_text()}")
            else:
                time.sleep(0.05)
        assert port, stderr.read_text()
        yield f"http://127.0.0.1:{port}", stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)




def test_page_in_headless_chromium(tmp_path, served_monitor):
    origin, server_err = served_monitor
    url = f"{origin}/?token={TOKEN}"
    shot, netlog = tmp_path / "page.png", tmp_path / "net.json"

    dumped = run_chromium(tmp_path, "dom", f"--log-net-log={netlog}", "--dump-dom", url)
    dom = dumped.stdout
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    plot = re.search(r'<svg id="loss-plot"[^>]*data-points="(\d+)"[^>]*>(.*?)</svg>', dom, re.S)
    assert plot, "the loss plot was not drawn"
    assert int(plot[1]) == 39
    polyline = re.search(r'<polyline[^>]*points="([^"]+)"', plot[2])
    assert polyline and len(polyline[1].split()) == 39
    assert "<title>kpro5 DFlash drafter</title>" in dom, "the page's script did not run"
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom and "<img" not in dom
    assert dom.count('<tr><td>') == 8, "one row per GPU"

    # every request the page made went to the monitor; the browser's own background traffic is not the page's
    events = json.loads(netlog.read_text())
    page_urls = [
        e["params"]["url"] for e in events["events"]
        if e.get("params", {}).get("initiator") == origin and "url" in e["params"]
    ]
    assert f"{origin}/api/status" in page_urls
    assert all(u.startswith(origin + "/") for u in page_urls), page_urls

    taken = run_chromium(tmp_path, "shot", f"--screenshot={shot}", url)
    assert taken.returncode == 0, taken.stderr[-2000:]
    width, height, distinct = png_facts(shot)
    assert (width, height) == (1280, 900)
    assert shot.stat().st_size > 30_000 and distinct > 50, "the screenshot is blank"

    assert TOKEN not in server_err.read_text(), "the token reached the access log"
    assert '"GET /api/status" 200' in server_err.read_text()
