"""The Grafana dashboards and their provisioning file: every query's metrics are ones the target's exporter release
exports (the metric catalog, read from that release's code; the monitor's from its real /metrics families), and
the files carry what Grafana's file provisioning reads: grafana/grafana pkg/services/provisioning/dashboards/types.go
(configV1: apiVersion 1, providers with name, type, orgId, folder, folderUid, editable, options, disableDeletion,
updateIntervalSeconds, allowUiUpdates; createDashboardJSON refuses a dashboard without a title) and file_reader.go
(options.path, the folder of *.json dashboards, each keyed by its uid)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from gpuhosts.metrics import catalog
from gpuhosts.observability import JOB_PREFIX, MONITOR_RELEASE
from gpuhosts.plans.observability import DASHBOARD_DIR, RULES_DIR, render_observability
from gpuhosts_monitor.metrics import FAMILIES
from observability_data import WATCHES

PROVIDER_KEYS = {"name", "type", "orgId", "folder", "folderUid", "editable", "options", "disableDeletion",
                 "updateIntervalSeconds", "allowUiUpdates"}
# A metric selected with its job: `name{...job="gpuhosts-<job>"...}`.
SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}')
PROMQL_WORDS = {"sum", "avg", "max", "min", "rate", "increase", "by", "histogram_quantile", "avg_over_time", "or"}


def exported(watch) -> dict[str, set[str]]:
    """Sample names each job's target exports, by job: the catalog's for its exporter release, and for the monitor
    the families its /metrics really writes; `up` is Prometheus's own for every target it scrapes."""
    names: dict[str, set[str]] = {}
    for target in watch.targets:
        if target.exporter == "monitor":
            names[target.job] = {name for name, _help in FAMILIES} | {"up"}
            continue
        release = catalog().release(target.exporter, target.release)
        names[target.job] = {s for m in release.metrics.values() for s in m.samples()} | {"up"}
    return names


def unknown_metrics(expr: str, names: dict[str, set[str]]) -> tuple[int, list[str]]:
    """(metrics read, those not exported by the job they are selected from)."""
    found, unknown = 0, []
    for metric, matchers in SELECTOR.findall(expr):
        if metric in PROMQL_WORDS:
            continue
        job = re.search(r'job="([^"]+)"', matchers)
        assert job, f"{metric} is selected without its job: {expr}"
        found += 1
        if metric not in names.get(job.group(1).removeprefix(JOB_PREFIX), set()):
            unknown.append(f"{metric} ({job.group(1)})")
    bare = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", SELECTOR.sub("", expr))) - PROMQL_WORDS
    bare = {w for w in bare if not re.fullmatch(r"le|service|gpu|position|\d.*|[smh]", w)}
    assert not bare, f"a name outside a selector: {sorted(bare)} in {expr}"
    return found, unknown


def render(tmp_path: Path, key: str):
    watch = WATCHES[key]()
    files = render_observability(watch, str(tmp_path))
    return watch, files


@pytest.mark.parametrize("key", sorted(WATCHES))
def test_every_query_reads_metrics_its_exporter_exports(tmp_path, key):
    watch, files = render(tmp_path, key)
    names = exported(watch)
    boards = [json.loads(text) for path, text in files.items() if path.startswith(DASHBOARD_DIR)]
    assert boards
    checked = 0
    for board in boards:
        for panel in board["panels"]:
            for target in panel["targets"]:
                count, unknown = unknown_metrics(target["expr"], names)
                assert count and not unknown, (board["uid"], panel["title"], unknown)
                checked += count
    rules = yaml.safe_load(files[f"{RULES_DIR}/gpuhosts-{watch.stack}.rules.yml"])
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        count, unknown = unknown_metrics(rule["expr"], names)
        assert count and not unknown, (rule["alert"], unknown)
    assert checked >= sum(len(p["targets"]) for b in boards for p in b["panels"])


def test_a_query_of_a_name_no_exporter_has_is_caught():
    names = exported(WATCHES["kpro5-vllm"]())
    count, unknown = unknown_metrics('rate(vllm:spec_decode_num_accepted_tokens{job="gpuhosts-engines"}[5m])', names)
    assert (count, unknown) == (1, ["vllm:spec_decode_num_accepted_tokens (gpuhosts-engines)"])


@pytest.mark.parametrize("key", sorted(WATCHES))
def test_dashboards_carry_what_grafanas_file_provisioning_reads(tmp_path, key):
    watch, files = render(tmp_path, key)
    provider = yaml.safe_load(files["grafana/provisioning/dashboards/gpuhosts.yaml"])
    assert provider["apiVersion"] == 1
    for entry in provider["providers"]:
        assert set(entry) <= PROVIDER_KEYS and entry["type"] == "file" and entry["name"]
        assert entry["options"]["path"] == f"{tmp_path}/{DASHBOARD_DIR}"
    uids = set()
    for path, text in files.items():
        if not path.startswith(DASHBOARD_DIR):
            continue
        board = json.loads(text)
        assert board["title"] and board["uid"] not in uids and len(board["uid"]) <= 40, path
        uids.add(board["uid"])
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), path
        for panel in board["panels"]:
            assert panel["type"] == "timeseries" and set(panel["gridPos"]) == {"h", "w", "x", "y"}
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)) and panel["datasource"]["type"] == "prometheus"
    expected = {"kpro5-sglang": {"inference"}, "kpro5-vllm": {"inference"}, "trainer": {"training"}}[key]
    assert {uid.rsplit("-", 1)[1] for uid in uids} == expected


def test_the_trainers_dashboard_shows_loss_acceptance_step_rate_eta_and_gpus(tmp_path):
    _watch, files = render(tmp_path, "trainer")
    board = json.loads(files[f"{DASHBOARD_DIR}/gpuhosts-trainer-training.json"])
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    monitor = catalog().release("monitor", MONITOR_RELEASE).metrics
    for role in ("loss", "acceptance_per_position", "steps_per_s", "eta", "last_step_age"):
        assert monitor[role].name in exprs, role
    assert "DCGM_FI_DEV_GPU_UTIL" in exprs
