"""The metric catalog (gpuhosts/metrics-catalog.yaml) as typed rows: per exporter and release, each metric by the role
rules and dashboards give it. Pure data access; the rules and dashboards are built in gpuhosts/observability.py."""

from __future__ import annotations

from enum import Enum
from functools import lru_cache
from pathlib import Path

import yaml

from gpuhosts.data_files import DATA_LOADER
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CATALOG_FILE = Path(__file__).resolve().parent / "metrics-catalog.yaml"


class MetricType(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricDef(_Row):
    name: str = Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    type: MetricType
    where: str = Field(min_length=1)

    def samples(self) -> tuple[str, ...]:
        """The sample names the exposition carries for this metric."""
        if self.type is MetricType.HISTOGRAM:
            return tuple(f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        return (self.name,)


class Release(_Row):
    source: str = Field(min_length=1)
    metrics: dict[str, MetricDef]


class Catalog(_Row):
    exporters: dict[str, dict[str, Release]]

    def release(self, exporter: str, version: str) -> Release:
        releases = self.exporters.get(exporter)
        if releases is None:
            raise KeyError(f"the metric catalog (gpuhosts/{CATALOG_FILE.name}) has no exporter {exporter!r}: add "
                           f"its releases' metrics there, read from each release's code")
        if version not in releases:
            raise KeyError(f"the metric catalog (gpuhosts/{CATALOG_FILE.name}) has no {exporter} release "
                           f"{version}: add its metrics there, read from that release's code (known: "
                           f"{', '.join(releases)})")
        return releases[version]

    def metric(self, exporter: str, version: str, role: str) -> MetricDef:
        release = self.release(exporter, version)
        if role not in release.metrics:
            raise KeyError(f"the metric catalog's {exporter} {version} names no metric for {role!r}")
        return release.metrics[role]

    def name(self, exporter: str, version: str, role: str) -> str:
        return self.metric(exporter, version, role).name


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    try:
        return Catalog.model_validate(yaml.load(CATALOG_FILE.read_text(), Loader=DATA_LOADER))
    except ValidationError as exc:
        raise ValueError(f"{CATALOG_FILE}: {exc}") from None
