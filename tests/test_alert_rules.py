"""The rendered alert rules and scrape configuration, checked by Prometheus's own promtool (Debian's prometheus
2.42): `check rules`, `check config`, and `test rules` with a case per alert in which it fires and one in which it
does not, its series named from the metric catalog (no name is written here)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuhosts.metrics import catalog
from gpuhosts.observability import DCGM_EXPORTER_RELEASE, DOWN_ALERTS, JOB_PREFIX, MONITOR_RELEASE, NODE_EXPORTER_RELEASE
from gpuhosts.plans.observability import RULES_DIR, render_observability
from observability_data import WATCHES, tool

ROOT = "/etc/gpuhosts/observability"


def rendered(tmp_path: Path, key: str):
    watch = WATCHES[key]()
    out = tmp_path / ROOT.lstrip("/")
    for path, text in render_observability(watch, str(out)).items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
    return watch, out


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("key", sorted(WATCHES))
def test_promtool_checks_the_rules_and_each_places_scrape_config(tmp_path, key):
    watch, out = rendered(tmp_path, key)
    rules = out / RULES_DIR / f"gpuhosts-{watch.stack}.rules.yml"
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    count = sum(len(g["rules"]) for g in yaml.safe_load(rules.read_text())["groups"])
    assert f"SUCCESS: {count} rules found" in checked.stdout
    for fragment in sorted((out / "prometheus").glob("scrape-*.yml")):
        config = yaml.safe_load(fragment.read_text())
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]}
        whole = tmp_path / f"prometheus-{fragment.stem}.yml"
        whole.write_text(yaml.safe_dump(config))
        checked = promtool("check", "config", str(whole))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        for job in config["scrape_configs"]:
            for path in job["file_sd_configs"][0]["files"]:
                groups = json.loads(Path(path).read_text())
                assert groups and all(g["targets"] for g in groups), path


def test_a_broken_rule_is_refused_by_promtool(tmp_path):
    """The check above can fail: promtool refuses an expression that does not parse."""
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"alert": "A", "expr": "sum(rate(x[5m])"}]}]}))
    assert promtool("check", "rules", str(bad)).returncode != 0


# --- promtool test rules -------------------------------------------------------------------------------------------

def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _labels(watch, job: str, **extra: str) -> dict[str, str]:
    target = next(t for t in watch.targets if t.job == job)
    return {"job": JOB_PREFIX + job, "instance": target.address, **target.labels, **extra}


def _engine(watch):
    engine = watch.engines[0]
    return engine, catalog().release(engine.exporter, engine.release).metrics


def down_case(job):
    def case(watch, fire):
        labels = _labels(watch, job)
        return [_series("up", labels, "0x10" if fire else "1x10")], "5m", labels, 0.0
    return case


def decode_case(watch, fire):
    engine, m = _engine(watch)
    labels = _labels(watch, "engines", service=engine.service)
    speed = engine.min_decode_tokens_per_s * (0.5 if fire else 2)
    itl = m["inter_token_latency"].name
    # 600 tokens a minute; the time they took sets the speed
    return ([_series(f"{itl}_count", labels, "0+600x30"), _series(f"{itl}_sum", labels, f"0+{600 / speed:g}x30")],
            "25m", {"service": engine.service}, speed)


def acceptance_case(watch, fire):
    engine, m = _engine(watch)
    labels = _labels(watch, "engines", service=engine.service)
    if "acceptance_rate" in m:
        # the seed's 1.1 % against a healthy 80 %, on both ranks
        value = "0.011x30" if fire else "0.8x30"
        return ([_series(m["acceptance_rate"].name, {**labels, "tp_rank": rank}, value) for rank in ("0", "1")],
                "25m", {"service": engine.service}, 0.011)
    accepted = "0+11x30" if fire else "0+400x30"
    return ([_series(m["accepted_tokens"].name, labels, accepted),
             _series(m["draft_tokens"].name, labels, "0+1000x30")], "25m", {"service": engine.service}, 0.011)


def _gpu(watch, **extra):
    return _labels(watch, "dcgm", gpu="0", UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", **extra)


def xid_case(watch, fire):
    labels = _gpu(watch)
    name = catalog().name("dcgm", DCGM_EXPORTER_RELEASE, "xid")
    return [_series(name, labels, "0 0 79x8" if fire else "0x10")], "5m", labels, 79.0


def ecc_case(watch, fire):
    labels = _gpu(watch)
    name = catalog().name("dcgm", DCGM_EXPORTER_RELEASE, "ecc_dbe")
    return [_series(name, labels, "0 0 0 1x7" if fire else "0x10")], "5m", labels, 1.0


def memory_case(watch, fire):
    labels = _gpu(watch)
    m = catalog().release("dcgm", DCGM_EXPORTER_RELEASE).metrics
    used, free = ("48600x30", "500x30") if fire else ("43000x30", "6100x30")
    return ([_series(m["memory_used"].name, labels, used), _series(m["memory_free"].name, labels, free)],
            "20m", labels, 48600 / 49100)


def storage_case(watch, fire):
    labels = _labels(watch, "node", device="/dev/nvme0n1p1", fstype="ext4", mountpoint=watch.storage)
    m = catalog().release("node", NODE_EXPORTER_RELEASE).metrics
    avail = "50000000000x20" if fire else "500000000000x20"
    return ([_series(m["filesystem_avail"].name, labels, avail),
             _series(m["filesystem_size"].name, labels, "1000000000000x20")], "15m", labels, 0.05)


def server_errors_case(watch, fire):
    target = next(t for t in watch.targets if t.job == "hidden-state-server")
    m = catalog().release(target.exporter, target.release).metrics
    base = _labels(watch, "hidden-state-server", handler="/v1/completions", method="POST")
    series = [_series(m["http_requests"].name, {**base, "status": "2xx"}, "0+30x10")]
    series.append(_series(m["http_requests"].name, {**base, "status": "5xx"}, "0+3x10" if fire else "0x10"))
    return series, "6m", {}, 1.0


def stalled_case(watch, fire):
    labels = _labels(watch, "training-monitor")
    name = catalog().name("monitor", MONITOR_RELEASE, "stalled")
    return [_series(name, labels, "0 0 1x8" if fire else "0x10")], "5m", labels, 1.0


def interrupted_case(watch, fire):
    labels = _labels(watch, "training-monitor")
    name = catalog().name("monitor", MONITOR_RELEASE, "interrupted")
    # quiet: interrupted for a moment only, then launched again (shorter than the rule's 5 minutes)
    return [_series(name, labels, "0 0 1x8" if fire else "0 0 1 1 0x6")], "9m", labels, 1.0


def failed_case(watch, fire):
    labels = _labels(watch, "training-monitor")
    name = catalog().name("monitor", MONITOR_RELEASE, "failed")
    # quiet: a failure the unit's restart clears within the rule's 10 minutes (RestartSec=60, then a launch)
    return [_series(name, labels, "0 0 1x14" if fire else "0 0 1x4 0x10")], "15m", labels, 1.0


CASES = {**{alert: down_case(job) for job, alert in DOWN_ALERTS.items()},
         "GpuhostsDecodeSlow": decode_case, "GpuhostsAcceptanceCollapsed": acceptance_case,
         "GpuhostsGpuXid": xid_case, "GpuhostsGpuEccUncorrectable": ecc_case, "GpuhostsGpuMemoryFull": memory_case,
         "GpuhostsStorageFilling": storage_case, "GpuhostsHiddenStateServerErrors": server_errors_case,
         "GpuhostsTrainingStalled": stalled_case, "GpuhostsTrainingInterrupted": interrupted_case,
         "GpuhostsTrainingFailed": failed_case}


def _go_float(value: float) -> str:
    # Go's strconv.FormatFloat(v, 'f', -1, 64), which text/template prints a float64 with: no exponent, no ".0"
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


# The template forms the rules use (Prometheus's template functions: humanizePercentage is "%.4g%%" of v × 100).
TEMPLATES = {
    r"\{\{ \$value \| humanizePercentage \}\}": lambda v: f"{v * 100:.4g}%",
    r'\{\{ \$value \| printf "%\.1f" \}\}': lambda v: f"{v:.1f}",
    r"\{\{ \$value \}\}": _go_float,
}


def expand(template: str, labels: dict[str, str], value: float) -> str:
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    for pattern, show in TEMPLATES.items():
        text = re.sub(pattern, lambda _m: show(value), text)
    assert "{{" not in text, f"a template form the test does not expand: {text}"
    return text


def rule_tests(watch, rules: dict) -> list[dict]:
    """A promtool test per alert and outcome: the alert's expected labels are its rule's labels and, where its
    expression keeps them, the series'; its annotations as the templates read with those labels and the value."""
    tests = []
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        for fire in (True, False):
            series, at, carried, value = CASES[rule["alert"]](watch, fire)
            labels = {**carried, **rule["labels"]}
            annotations = {k: expand(v, labels, value) for k, v in rule["annotations"].items()}
            expected = [{"exp_labels": labels, "exp_annotations": annotations}] if fire else []
            tests.append({"interval": "1m", "input_series": series,
                          "alert_rule_test": [{"eval_time": at, "alertname": rule["alert"], "exp_alerts": expected}]})
    return tests




@pytest.mark.parametrize("key", sorted(WATCHES))
def test_every_alert_fires_on_its_case_and_stays_quiet_on_the_other(tmp_path, key):
    watch, out = rendered(tmp_path, key)
    rule_file = out / RULES_DIR / f"gpuhosts-{watch.stack}.rules.yml"
    rules = yaml.safe_load(rule_file.read_text())
    assert {r["alert"] for g in rules["groups"] for r in g["rules"]} <= set(CASES), "an alert without a test case"
    tests = rule_tests(watch, rules)
    document = {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": tests}
    spec = tmp_path / "tests.yml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    result = promtool("test", "rules", str(spec))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    assert "SUCCESS" in result.stdout
    assert len(tests) == 2 * sum(len(g["rules"]) for g in rules["groups"])


def test_promtool_test_rules_fails_when_an_alert_does_not_fire(tmp_path):
    """The cases above can fail: the firing case of a stall given a quiet series is reported as a failure."""
    watch, out = rendered(tmp_path, "trainer")
    rule_file = out / RULES_DIR / f"gpuhosts-{watch.stack}.rules.yml"
    rules = yaml.safe_load(rule_file.read_text())
    stall = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "GpuhostsTrainingStalled"][0]
    series, at, carried, _value = stalled_case(watch, fire=False)
    spec = tmp_path / "tests.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": at, "alertname": stall["alert"], "exp_alerts": [{"exp_labels": {**carried, **stall["labels"]}}]}]}]}))
    result = promtool("test", "rules", str(spec))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
