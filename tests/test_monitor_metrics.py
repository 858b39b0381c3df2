"""The training monitor's /metrics: Prometheus's text format (read back by prometheus_client's own parser), the same
numbers as /api/status, the stall verdict by the monitor's own rule (an interrupted launch apart), and exactly the
names the metric catalog lists for it. "Now" is the app's clock; nothing waits."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuhosts.metrics import catalog
from gpuhosts.observability import MONITOR_RELEASE
from gpuhosts_monitor.metrics import CONTENT_TYPE, FAMILIES
from test_monitor import LOG_WRITTEN, TRAINING, app_for, health_server  # noqa: F401 - a fixture, used by name
from test_monitor_h200_run import cut


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
