"""What the monitor claims about a run holds: a log that stops advancing is "stalled" and has no ETA, and a DFlash
drafter's acceptance figures (eal, full_acc, accuracy per block position) reach the JSON and the page.

"Now" is passed to the app (create_app's clock) and the log's mtime is set explicitly: nothing here waits for time
to pass.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
from gpuhosts_monitor.app import STALL_FACTOR, STALL_FLOOR_S, MonitorConfig, create_app
from gpuhosts_monitor.parse import parse_text
from gpuhosts_monitor.sources import LogFollower
from werkzeug.serving import make_server
from monitor_bed import JUST_AFTER, LOG_WRITTEN, SAFETENSORS, SMI, TRAINING, app_for, fake_nvidia_smi, make_checkpoints, run_chromium, served_log

HOURS_3 = 3 * 3600

# Per fixture: the newest record's acceptance figures (eal, full_acc, positions logged, first and last position's
# accuracy), how many points the eal curve has, the median interval between logged steps and where it comes from,
# and the state at a given age of the last step.
FIXTURES = [
    pytest.param(
        "speculators-0.9.0-fresh.log",
        {
            "acceptance": (3.276, 0.495, 15, (1, 0.783), (15, 0.284)),
            "step": 38,
            "eal_points": 39,
            "eal_ends": ([0, 1.174], [38, 3.276]),
            # rich prints whole seconds; a step every 2 s
            "interval": (2.0, "log-timestamps"),
            "states": {5: "running", 120: "running", 121: "stalled", HOURS_3: "stalled"},
        },
        id="speculators-0.9.0-fresh",
    ),
    pytest.param(
        "speculators-0.9.0-resume-midepoch.log",
        {
            "acceptance": (2.4, 0.4, 15, (1, 0.633), (15, 0.229)),
            "step": 29,
            # the resumed launch's steps 12… replace the lost ones: still one point per step
            "eal_points": 30,
            "eal_ends": ([0, 1.174], [29, 2.4]),
            "interval": (2.0, "log-timestamps"),
            "states": {5: "running", HOURS_3: "stalled"},
        },
        id="speculators-0.9.0-resume-midepoch",
    ),
    pytest.param(
        # 0.5.0 logs no eal, and its position keys have spaces (train/position 14 acc)
        "speculators-0.5.0-resume-epoch.log",
        {
            "acceptance": (None, 0.569, 15, (1, 0.9), (15, 0.326)),
            "step": 45,
            "eal_points": 0,
            "eal_ends": None,
            "interval": (3.0, "log-timestamps"),
            "states": {5: "running", HOURS_3: "stalled"},
        },
        id="speculators-0.5.0-resume-epoch",
    ),
    pytest.param(
        # transformers: no acceptance figures, no timestamps (the interval from tqdm: every 5th step at 1.25 it/s);
        # it finished, which no silence changes
        "hf-trainer-5.log",
        {
            "acceptance": (None, None, 0, None, None),
            "step": None,
            "eal_points": 0,
            "eal_ends": None,
            "interval": (4.0, "tqdm"),
            "states": {5: "finished", HOURS_3: "finished"},
        },
        id="hf-trainer-5",
    ),
]


def status_at(tmp_path: Path, log: Path, health_url: str, age: float) -> dict:
    return app_for(tmp_path, log, health_url, now=LOG_WRITTEN + age).test_client().get("/api/status").get_json()


@pytest.mark.parametrize("name, want", FIXTURES)
def test_acceptance_figures_from_fixture(tmp_path, health_server, name, want):
    s = status_at(tmp_path, TRAINING / name, health_server.url, 5)
    a = s["training"]["acceptance"]
    eal, full_acc, count, first, last = want["acceptance"]
    assert (a["eal"], a["full_acc"], len(a["positions"]), a["step"]) == (eal, full_acc, count, want["step"])
    if count:
        assert [p["position"] for p in a["positions"]] == list(range(1, count + 1))
        assert (a["positions"][0]["position"], a["positions"][0]["acc"]) == first
        assert (a["positions"][-1]["position"], a["positions"][-1]["acc"]) == last
    assert len(s["curves"]["eal"]) == want["eal_points"]
    if want["eal_ends"]:
        assert (s["curves"]["eal"][0], s["curves"]["eal"][-1]) == want["eal_ends"]
    # the acceptance figures are the newest record's, the same numbers as its raw metrics
    if eal is not None:
        assert s["training"]["metrics"]["train/eal"] == eal


@pytest.mark.parametrize("name, want", FIXTURES)
def test_stall_state_from_fixture(tmp_path, health_server, name, want):
    interval, source = want["interval"]
    for age, state in want["states"].items():
        (tmp_path / str(age)).mkdir()
        t = status_at(tmp_path / str(age), TRAINING / name, health_server.url, age)["training"]
        assert (t["state"], t["last_step_age_s"]) == (state, age), age
        assert t["stall"] == {
            "threshold_s": max(STALL_FLOOR_S, STALL_FACTOR * interval),
            "step_interval_s": interval,
            "interval_source": source,
            "floor_s": STALL_FLOOR_S,
            "factor": STALL_FACTOR,
        }
        if state == "stalled":
            assert t["eta_s"] is None, "no ETA while stalled"
        else:
            assert t["eta_s"] is not None, age


def timestamped(steps: list[tuple[int, int]]) -> str:
    """key=value records with ISO times: (step, seconds after 10:00:00)."""
    return "".join(
        f"2026-05-01 10:{s // 60:02d}:{s % 60:02d},000 INFO train: step={step} loss={3 - step / 100:.3f} lr=1e-4\n"
        for step, s in steps
    )


@pytest.mark.parametrize(
    "steps, age, state, threshold",
    [
        # a step a minute: ten intervals before it is stalled
        pytest.param([(i, 60 * i) for i in range(6)], 599, "running", 600, id="slow-steps-within"),
        pytest.param([(i, 60 * i) for i in range(6)], 601, "stalled", 600, id="slow-steps-beyond"),
        # one slow checkpoint gap does not move the median
        pytest.param([(0, 0), (1, 20), (2, 40), (3, 300), (4, 320), (5, 340)], 199, "running", 200,
                     id="median-ignores-checkpoint-gap"),
        pytest.param([(0, 0), (1, 20), (2, 40), (3, 300), (4, 320), (5, 340)], 201, "stalled", 200,
                     id="median-ignores-checkpoint-gap-beyond"),
        # sub-second steps: rich's whole seconds measure 0, the floor holds
        pytest.param([(i, 0) for i in range(5)], 119, "running", 120, id="sub-second-steps-floor"),
        # one step: no interval yet, the floor holds
        pytest.param([(0, 0)], 121, "stalled", 120, id="single-step-floor"),
    ],
)
def test_stall_threshold_follows_the_observed_interval(tmp_path, health_server, steps, age, state, threshold):
    log = tmp_path / "train.log"
    log.write_text(timestamped(steps))
    t = status_at(tmp_path, log, health_server.url, age)["training"]
    assert (t["state"], t["stall"]["threshold_s"]) == (state, threshold)
    if state == "stalled":
        assert t["eta_s"] is None


def test_a_log_growing_without_steps_still_stalls(tmp_path, health_server):
    """A wedged collective keeps printing warnings: the log's mtime moves, the last step does not."""
    log = served_log(tmp_path, TRAINING / "speculators-0.9.0-fresh.log")
    now = [LOG_WRITTEN + 5]
    client = create_app(
        MonitorConfig(log=log, checkpoints=tmp_path, server_url=health_server.url,
                      nvidia_smi=str(fake_nvidia_smi(tmp_path, SMI / "query-gpu-monitor-idle.csv")), cache_s=0),
        clock=lambda: now[0],
    ).test_client()
    assert client.get("/api/status").get_json()["training"]["state"] == "running"
    with log.open("a") as fh:
        fh.write("\n[rank0]:[W501 10:30:00] ProcessGroupNCCL.cpp:1234] Watchdog caught collective operation timeout\n")
    os.utime(log, (LOG_WRITTEN + 1800, LOG_WRITTEN + 1800))
    now[0] = LOG_WRITTEN + 1805
    t = client.get("/api/status").get_json()["training"]
    assert (t["state"], t["last_step_age_s"], t["log_age_s"], t["eta_s"]) == ("stalled", 1805, 5, None)


def test_step_seen_at_is_the_mtime_of_the_read_that_brought_the_step(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step=1 loss=2.0 lr=1e-4\n")
    os.utime(log, (1000, 1000))
    follower = LogFollower(log)
    assert follower.refresh()[0].step_seen_at == 1000
    with log.open("a") as fh:
        fh.write("a warning, no step\n")
    os.utime(log, (2000, 2000))
    assert follower.refresh()[0].step_seen_at == 1000
    with log.open("a") as fh:
        fh.write("step=2 loss=1.9 lr=1e-4\n")
    os.utime(log, (3000, 3000))
    assert follower.refresh()[0].step_seen_at == 3000
    # parse_text reads no file: it cannot know when a step was written
    assert parse_text(log.read_text()).step_seen_at is None


def test_stalled_in_validation_says_so(tmp_path, health_server):
    log = tmp_path / "train.log"
    log.write_text(
        (TRAINING / "speculators-0.9.0-fresh.log").read_text().rsplit("\n", 1)[0]
        + "\n[10:01:44] INFO     Validation epoch 2/2 started                  trainer.py:754\n"
    )
    t = status_at(tmp_path, log, health_server.url, HOURS_3)["training"]
    assert (t["state"], t["phase"], t["eta_s"]) == ("stalled", "val", None)


def test_page_without_script_shows_stall_and_acceptance(tmp_path, health_server):
    """The HTML as served, before the page's script runs (and for a browser without it)."""
    app = app_for(tmp_path, TRAINING / "speculators-0.9.0-fresh.log", health_server.url, now=LOG_WRITTEN + HOURS_3)
    html = app.test_client().get("/").get_data(as_text=True)
    assert '<span id="state" class="badge stalled">stalled</span>' in html
    assert '<div class="v" id="eta">–</div>' in html
    assert '<dd id="eal">3.276</dd>' in html and '<dd id="full-acc">0.495</dd>' in html
    assert len(re.findall(r'<li data-position="\d+">', html)) == 15


# ---------------------------------------------------------------------------------------------------------------
# the page in headless Chromium, against the app served on a loopback port with a fixed "now"


@pytest.fixture
def serve(tmp_path, health_server):
    """serve(log, now) -> origin; the socket listens before it returns, so a browser started after it connects."""
    servers = []

    def start(log: Path, now: float) -> str:
        config = MonitorConfig(
            log=served_log(tmp_path, log), server_url=health_server.url, title="kpro5 DFlash drafter",
            checkpoints=make_checkpoints(tmp_path / "ckpt", {"0": {"age": 60, "files": SAFETENSORS}}),
            nvidia_smi=str(fake_nvidia_smi(tmp_path, SMI / "query-gpu-monitor-idle.csv")), cache_s=0,
        )
        server = make_server("127.0.0.1", 0, create_app(config, clock=lambda: now), threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def dom_of(tmp_path: Path, origin: str, name: str) -> str:
    done = run_chromium(tmp_path, name, "--dump-dom", origin + "/")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # set only by the page's script from /api/status: the DOM is the rendered one, not the served HTML
    assert re.search(r'<span class="dim" id="eal-count">\(\d+ points\)</span>', dom), "the page's script did not run"
    return dom


def text_of(dom: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', dom)
    assert match, element_id
    return match[1]


@pytest.mark.parametrize(
    "age, state, eta, last_step",
    [
        pytest.param(5, "running", "23s", "5s ago", id="running"),
        pytest.param(HOURS_3, "stalled", "–", "3h 0m ago", id="stalled-3h"),
    ],
)
def test_page_in_chromium_stall_and_eta(tmp_path, serve, age, state, eta, last_step):
    origin = serve(TRAINING / "speculators-0.9.0-fresh.log", LOG_WRITTEN + age)
    dom = dom_of(tmp_path, origin, state)
    assert f'<span id="state" class="badge {state}">{state}</span>' in dom
    assert text_of(dom, "eta") == eta
    assert text_of(dom, "last-step") == last_step
    assert text_of(dom, "stall-rule") == "stalled after 2m 0s without a step"


@pytest.mark.parametrize(
    "name, eal, full_acc, positions, eal_points",
    [
        pytest.param("speculators-0.9.0-fresh.log", "3.276", "0.495", [("1", "0.783"), ("15", "0.284")], 39,
                     id="speculators-0.9.0-fresh"),
        pytest.param("speculators-0.9.0-resume-midepoch.log", "2.4", "0.4", [("1", "0.633"), ("15", "0.229")], 30,
                     id="speculators-0.9.0-resume-midepoch"),
        pytest.param("speculators-0.5.0-resume-epoch.log", "–", "0.569", [("1", "0.9"), ("15", "0.326")], 0,
                     id="speculators-0.5.0-no-eal"),
    ],
)
def test_page_in_chromium_acceptance(tmp_path, serve, name, eal, full_acc, positions, eal_points):
    origin = serve(TRAINING / name, JUST_AFTER)
    dom = dom_of(tmp_path, origin, "acc")
    assert (text_of(dom, "eal"), text_of(dom, "full-acc")) == (eal, full_acc)
    items = re.findall(
        r'<li data-position="(\d+)"><span>pos \d+</span><progress[^>]*></progress><span class="acc">([^<]*)</span>',
        dom,
    )
    assert len(items) == 15 and [items[0], items[-1]] == positions
    plot = re.search(r'<svg id="eal-plot"[^>]*data-points="(\d+)"[^>]*>(.*?)</svg>', dom, re.S)
    assert plot and int(plot[1]) == eal_points, "one point per logged step"
    if eal_points:
        polyline = re.search(r'<polyline[^>]*points="([^"]+)"', plot[2])
        assert polyline and len(polyline[1].split()) == eal_points
    else:
        assert "no data yet" in plot[2]
