"""The files a Prometheus (and a Grafana) the user runs reads to watch a stack, rendered from gpuhosts.observability:
rule file, file_sd targets per place, a scrape-config fragment per place, the DCGM exporter's counters file, the
dashboards and their provisioning file. Paths are relative to the folder they are installed in."""

from __future__ import annotations

import json

import yaml

from gpuhosts.observability import (
    Watch,
    alert_rules,
    counters_csv,
    dashboard_provider,
    dashboards,
    file_sd,
    places,
    scrape_configs,
)

HEADER = "# managed by gpuhosts — generated from gpuhosts/metrics-catalog.yaml; do not edit\n"
RULES_DIR = "prometheus/rules"
SD_DIR = "prometheus/file_sd"
DASHBOARD_DIR = "grafana/dashboards"


def _yaml(document) -> str:
    return HEADER + yaml.safe_dump(document, sort_keys=False, width=120, allow_unicode=True)


def render_observability(watch: Watch, root: str) -> dict[str, str]:
    """{relative path: text} of every file; `root` is the folder they land in (the scrape fragment and the
    provisioning file name their files by absolute path there)."""
    files: dict[str, str] = {f"{RULES_DIR}/gpuhosts-{watch.stack}.rules.yml": _yaml(alert_rules(watch))}
    for name, groups in file_sd(watch).items():
        files[f"{SD_DIR}/{name}"] = json.dumps(groups, indent=2) + "\n"
    for place in places(watch):
        files[f"prometheus/scrape-{place}.yml"] = _yaml({
            "rule_files": [f"{root}/{RULES_DIR}/gpuhosts-{watch.stack}.rules.yml"],
            "scrape_configs": scrape_configs(watch, f"{root}/{SD_DIR}", place)})
    files["dcgm-exporter/gpuhosts-counters.csv"] = counters_csv()
    for name, board in dashboards(watch).items():
        files[f"{DASHBOARD_DIR}/{name}"] = json.dumps(board, indent=2, ensure_ascii=False) + "\n"
    files["grafana/provisioning/dashboards/gpuhosts.yaml"] = _yaml(dashboard_provider(f"{root}/{DASHBOARD_DIR}"))
    return files
