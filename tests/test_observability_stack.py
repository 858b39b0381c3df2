"""`gpuhosts:monitoring` in the stacks: typed, off unless declared, loopback by default, rendered into the plan as
the files of a unit (so each is a fact), and the monitor's bearer token read by Prometheus from a file."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.observability import MONITOR_TOKEN_FILE, watch_trainer
from gpuhosts.plans.monitoring_files import monitoring_files
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_monitor import MONITOR_TOKEN
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_stack, validate_trainer_stack
from observability_data import tool

MONITORING_KINDS = {"node-exporter": "NodeExporter", "dcgm-exporter": "DcgmExporter",
                    "monitoring-files": "MonitoringFiles"}


def _graphs(values_of):
    kpro5, trainer = values_of(kpro5_values()), values_of(trainer_values())
    return {"kpro5": plan_host(validate_stack(kpro5, KPRO5_SECRETS)),
            "trainer": plan_training_node(validate_trainer_stack(trainer, TRAINER_SECRETS)).graph}


def _without_monitoring(values):
    return {k: v for k, v in values.items() if k != "monitoring"}


@pytest.mark.parametrize("stack", ["kpro5", "trainer"])
def test_the_committed_stacks_declare_monitoring_and_plan_its_units(stack):
    graph = _graphs(lambda v: v)[stack]
    assert {key: graph[key].kind for key in MONITORING_KINDS if key in graph.units} == MONITORING_KINDS
    files = {f.path for f in graph["monitoring-files"].files}
    assert f"/etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-{stack}.rules.yml" in files
    assert any(p.startswith("/etc/gpuhosts/monitoring/prometheus/file_sd/") for p in files)
    assert any(p.startswith("/etc/gpuhosts/monitoring/grafana/dashboards/") for p in files)
    # every file a fact by its digest: a deleted rule file is drift
    assert {f"file {p}" for p in files} <= set(graph["monitoring-files"].desired)
    units = {f.path: f.content for f in graph["node-exporter"].files}
    assert "--web.listen-address=127.0.0.1:9100" in units["/etc/systemd/system/gpuhosts-node-exporter.service"]
    assert {f.path for f in graph["dcgm-exporter"].files} >= {
        "/etc/gpuhosts/monitoring/dcgm-exporter/gpuhosts-counters.csv"}


@pytest.mark.parametrize("stack", ["kpro5", "trainer"])
def test_without_the_key_nothing_of_monitoring_is_installed(stack):
    graph = _graphs(_without_monitoring)[stack]
    assert not set(MONITORING_KINDS) & set(graph.units)


CASES = [
    ({"bind": "localhost"}, "gpuhosts:monitoring.bind", "write 127.0.0.1"),
    ({"nodeExporterPort": 80}, "gpuhosts:monitoring.nodeExporterPort", "must be at least 1024, not 80"),
    ({"filesDir": "/etc"}, "gpuhosts:monitoring.filesDir", "a folder of its own"),
    ({"scrapeToken": "x"}, "gpuhosts:monitoring.scrapeToken", ""),
    ({"dcgmExporterVersion": "latest"}, "gpuhosts:monitoring.dcgmExporterVersion", "not a Debian package version"),
]


@pytest.mark.parametrize("value, path, words", CASES, ids=[c[1].rsplit(".", 1)[1] for c in CASES])
def test_a_bad_monitoring_value_names_the_field_at_plan_time(value, path, words):
    for validate, values, secrets in ((validate_stack, kpro5_values(), KPRO5_SECRETS),
                                      (validate_trainer_stack, trainer_values(), TRAINER_SECRETS)):
        with pytest.raises(ConfigError) as error:
            validate({**values, "monitoring": value}, secrets)
        found = [p for p in error.value.problems if p.path == path]
        assert found and words in found[0].message, error.value.problems


def _trainer_with_token(monitoring):
    values = trainer_values()
    values["training"]["monitor"] = {"bind": "0.0.0.0", "port": 8686, "tokenSecret": "monitorToken"}
    values["monitoring"] = monitoring
    return validate_trainer_stack(values, TRAINER_SECRETS | {"monitorToken"})


@pytest.mark.parametrize("monitoring, expected", [({}, MONITOR_TOKEN), ({"monitorTokenFile": "/etc/prometheus/m.token"},
                                                                        "/etc/prometheus/m.token")])
def test_the_monitor_is_scraped_with_its_token_from_a_file(monitoring, expected):
    watch = watch_trainer(stack := _trainer_with_token(monitoring), stack.monitoring)
    files = {f.path: f.content for f in monitoring_files(watch)}
    fragment = yaml.safe_load(files["/etc/gpuhosts/monitoring/prometheus/scrape-trainer.yml"])
    jobs = {job["job_name"]: job for job in fragment["scrape_configs"]}
    assert jobs["gpuhosts-training-monitor"]["authorization"] == {"type": "Bearer", "credentials_file": expected}
    assert all("authorization" not in job for name, job in jobs.items() if name != "gpuhosts-training-monitor")
    assert not any("credentials:" in text or "bearer_token:" in text for text in files.values())


def test_the_monitor_without_a_token_is_scraped_without_one():
    stack = validate_trainer_stack(trainer_values(), TRAINER_SECRETS)
    fragment = yaml.safe_load(next(f.content for f in monitoring_files(watch_trainer(stack, stack.monitoring))
                                   if f.path.endswith("scrape-trainer.yml")))
    assert all("authorization" not in job for job in fragment["scrape_configs"])


def test_the_token_file_is_the_one_the_monitor_unit_writes():
    assert MONITOR_TOKEN_FILE == MONITOR_TOKEN


def test_promtool_accepts_the_scrape_with_a_token_file(tmp_path):
    token = tmp_path / "monitor.token"
    token.write_text("t0ken\n")
    watch = watch_trainer(stack := _trainer_with_token({"monitorTokenFile": str(token)}), stack.monitoring)
    root = stack.monitoring.files_dir
    for f in monitoring_files(watch):
        target = tmp_path / f.path.removeprefix(root + "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.content.replace(root, str(tmp_path)))
    result = subprocess.run([tool("promtool"), "check", "config", str(tmp_path / "prometheus/scrape-trainer.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
