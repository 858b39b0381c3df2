"""The training monitor's /metrics: Prometheus's text format (read back by prometheus_client's own parser), the same
numbers as /api/status, the stall verdict by the monitor's own rule (an interrupted launch apart), and exactly the
names the metric catalog lists for it. "Now" is the app's clock; nothing waits."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuhosts.metrics import catalog
from gpuhosts.observability import MONITOR_RELEASE
from gpuhosts_monitor.metrics import CONTENT_TYPE, FAMILIES
from monitor_bed import LOG_WRITTEN, TRAINING, app_for
from h200_run_log import cut


def scrape(tmp_path, log, url, age):
    client = app_for(tmp_path, log, url, now=LOG_WRITTEN + age).test_client()
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["Content-Type"] == CONTENT_TYPE
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, client.get("/api/status").get_json()


def test_the_catalog_lists_exactly_the_monitors_families():
    assert {m.name for m in catalog().release("monitor", MONITOR_RELEASE).metrics.values()} == {n for n, _h in FAMILIES}


# (log, age of its last step in s, stalled): speculators-0.9.0-fresh.log logs a step every 2 s, so its threshold is
# the 120 s floor (tests/test_monitor_truth.py)
CASES = [
    pytest.param("speculators-0.9.0-fresh.log", 5, 0.0, id="running"),
    pytest.param("speculators-0.9.0-fresh.log", 121, 1.0, id="stalled"),
]


@pytest.mark.parametrize("log, age, stalled", CASES)
def test_metrics_say_what_the_status_says(tmp_path, health_server, log, age, stalled):
    samples, status = scrape(tmp_path, TRAINING / log, health_server.url, age)
    t = status["training"]
    assert samples[("gpuhosts_training_stalled", ())] == stalled
    assert (t["state"] == "stalled") == bool(stalled)
    assert samples[("gpuhosts_training_step", ())] == t["step"] == 38
    assert samples[("gpuhosts_training_total_steps", ())] == t["total_steps"]
    assert samples[("gpuhosts_training_loss", ())] == t["loss"]
    assert samples[("gpuhosts_training_last_step_age_seconds", ())] == t["last_step_age_s"] == age
    assert samples[("gpuhosts_training_stall_threshold_seconds", ())] == t["stall"]["threshold_s"] == 120.0
    assert samples[("gpuhosts_training_acceptance_length", ())] == t["acceptance"]["eal"]
    positions = {dict(k[1])["position"]: v for k, v in samples.items() if k[0] == "gpuhosts_training_acceptance_per_position"}
    assert positions == {str(p["position"]): p["acc"] for p in t["acceptance"]["positions"]} and len(positions) == 15
    assert samples[("gpuhosts_training_server_up", ())] == 1.0
    if stalled:
        assert ("gpuhosts_training_eta_seconds", ()) not in samples, "no ETA while stalled"


# (cut of the real H200 log, age of its last write in s, state, stalled, interrupted): an hour after the last step a
# launch that speculators' graceful shutdown ended is interrupted, not stalled; one that just stopped logging is
# stalled (its steps came every 1-2 s, so the 120 s floor is the threshold)
INTERRUPTED = [
    pytest.param("whole", 3600, "interrupted", 0.0, 1.0, id="interrupted"),
    pytest.param("before the last SIGTERM", 3600, "stalled", 1.0, 0.0, id="stalled"),
    pytest.param("before the last SIGTERM", 5, "running", 0.0, 0.0, id="running"),
    pytest.param("the next launch started", 3600, "waiting", 0.0, 0.0, id="restarted"),
]


@pytest.mark.parametrize("name, age, state, stalled, interrupted", INTERRUPTED)
def test_an_interrupted_run_is_exported_apart_from_a_stalled_one(tmp_path, health_server, name, age, state, stalled,
                                                                  interrupted):
    log = tmp_path / "train.log"
    log.write_text(cut(name), encoding="utf-8", newline="")
    samples, status = scrape(tmp_path, log, health_server.url, age)
    assert status["training"]["state"] == state
    assert (samples[("gpuhosts_training_stalled", ())], samples[("gpuhosts_training_interrupted", ())]) == (
        stalled, interrupted)


def test_a_missing_log_exports_no_readings_but_every_family(tmp_path, health_server):
    client = app_for(tmp_path, tmp_path / "absent.log", health_server.url).test_client()
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").get_data(as_text=True))}
    assert set(families) == {n for n, _h in FAMILIES}
    assert [s.value for s in families["gpuhosts_training_stalled"].samples] == [0.0]
    assert families["gpuhosts_training_step"].samples == []


def test_metrics_need_the_token_like_every_page(tmp_path, health_server):
    client = app_for(tmp_path, TRAINING / "speculators-0.9.0-fresh.log", health_server.url, token="t0k3n").test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer t0k3n"}).status_code == 200


# How a run ends, from logs of speculators 0.7.0's scripts/train.py under the rendered launch script and torchrun,
# captured on one NVIDIA H100 (driver 580.159.04; tests/fixtures/training/README.md): the run to its end, its
# training worker killed by SIGKILL at step 11, and `systemctl stop` (SIGTERM to the unit's processes) at step 9.
# Read just after the end and three hours later: an ended run is never stalled.
ENDS = {
    "speculators-0.7.0-h100-finished.log": dict(
        state="finished", gauges={"finished": 1.0, "failed": 0.0, "interrupted": 0.0},
        training={"step": 72, "progress": 1.0, "epoch": 2, "epochs_total": 2, "eta_s": 0,
                  "launch_end": {"result": "success", "code": "exited", "status": "0", "line": 1848}}),
    "speculators-0.7.0-h100-killed.log": dict(
        state="failed", gauges={"finished": 0.0, "failed": 1.0, "interrupted": 0.0},
        training={"step": 11, "epoch": 1, "epochs_total": 2, "eta_s": None},
        failure={"step": 11, "exitcode": "-9", "rank": "0",
                 "summary": "rank 0 died at step 11, exit code -9: Signal 9 (SIGKILL) received by PID 1009"}),
    "speculators-0.7.0-h100-interrupted.log": dict(
        state="interrupted", gauges={"finished": 0.0, "failed": 0.0, "interrupted": 1.0},
        training={"step": 9, "epoch": 1, "epochs_total": 2, "eta_s": None}),
}


@pytest.mark.parametrize("age", [5, 3 * 3600])
@pytest.mark.parametrize("name", ENDS)
def test_a_run_that_ended_is_shown_as_it_ended_never_stalled(tmp_path, health_server, name, age):
    want = ENDS[name]
    samples, status = scrape(tmp_path, TRAINING / name, health_server.url, age)
    training = status["training"]
    assert training["state"] == want["state"]
    assert samples[("gpuhosts_training_stalled", ())] == 0.0
    assert {gauge: samples[(f"gpuhosts_training_{gauge}", ())] for gauge in want["gauges"]} == want["gauges"]
    assert {key: training[key] for key in want["training"]} == want["training"]
    if "failure" in want:
        assert {key: training["failure"][key] for key in want["failure"]} == want["failure"]
    else:
        assert training["failure"] is None


def test_a_new_launch_clears_how_the_last_one_ended(tmp_path, health_server):
    """systemd starts the unit again after a failure (Restart=on-failure): the launch's first line ends the
    failure, and the run shows as running again, not failed."""
    log = tmp_path / "train.log"
    log.write_text((TRAINING / "speculators-0.7.0-h100-killed.log").read_text() + "training launch started\n")
    samples, status = scrape(tmp_path, log, health_server.url, 5)
    assert status["training"]["failure"] is None and samples[("gpuhosts_training_failed", ())] == 0.0
    assert status["training"]["state"] == "running"
