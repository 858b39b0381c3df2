"""The metric catalog against what reads or imitates the same metrics elsewhere: the engines' drivers (what the
deploy gate reads) name the catalog's metrics of their pinned release, and the engine stand-in (tests/engine_standin.py)
exports no name the real release lacks."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_standin import PINNED, Engine
from gpuhosts.engines import driver_for
from gpuhosts.metrics import MetricType, catalog
from gpuhosts.services import EngineSpec

# The gate's roles (gpuhosts/hostside/gate_probe.py ACCEPTANCE_KINDS) as the catalog's roles.
GATE_ROLES = {"length": "acceptance_length", "rate": "acceptance_rate", "drafts": "drafts",
              "draft_tokens": "draft_tokens", "accepted": "accepted_tokens"}


@pytest.mark.parametrize("engine", sorted(PINNED))
def test_the_gate_reads_the_catalogs_metrics_of_the_pinned_release(engine):
    metrics = driver_for(EngineSpec(name=engine, version=PINNED[engine])).acceptance_metrics()
    release = catalog().release(engine, PINNED[engine]).metrics
    for role, name in metrics.items():
        if role != "kind":
            assert release[GATE_ROLES[role]].name == name, role


@pytest.mark.parametrize("kind", sorted(PINNED))
def test_the_engine_stand_in_exports_only_names_of_the_real_release(kind):
    release = catalog().release(kind, PINNED[kind]).metrics
    known = {s for m in release.values() for s in m.samples()}
    exported = {s.name for f in text_string_to_metric_families(Engine(kind=kind).metrics()) for s in f.samples}
    assert exported and exported <= known, sorted(exported - known)


def test_every_catalog_row_has_a_source_and_a_type():
    for exporter, releases in catalog().exporters.items():
        for version, release in releases.items():
            assert release.source, (exporter, version)
            for role, metric in release.metrics.items():
                assert metric.type in MetricType and metric.where, (exporter, version, role)
                if metric.type is MetricType.COUNTER and exporter in PINNED:
                    # prometheus_client exposes a counter as <family>_total
                    assert metric.name.endswith("_total"), (exporter, role)
