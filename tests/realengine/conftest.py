from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from realengine import PROJECT, Project, cli_available
from realengine.beds import Converged, Snapshot
from realengine.hosts import SglangStandin
from simhost import made_once, run_folder

FIGURES = PROJECT / "build" / "pulumi-figures"


def pytest_collection_modifyitems(config, items):
    # `make test-pulumi` requires the CLI (it builds it first); a bare pytest run without it skips the tier.
    problem = cli_available()
    if not problem:
        return
    if os.environ.get("GPUHOSTS_REAL_ENGINE") == "required":
        pytest.exit(problem, returncode=2)
    for item in items:
        if "realengine" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=problem))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    return Project(tmp_path_factory.mktemp("real-engine") / "gpuhosts")


@pytest.fixture(scope="session")
def kpro5_snapshot(tmp_path_factory) -> Snapshot:
    """kpro5's host side converged by the CLI once per test run, from a project of its own, and kept as a snapshot
    that every module restores by copy (Converged.restore) instead of converging it again."""
    root = run_folder(tmp_path_factory) / "kpro5-snapshot"
    with made_once(root) as first:
        if first:
            host = Converged.seed(Project(root / "project" / "gpuhosts"), root / "host")
            try:
                host.up()
                host.snapshot(root / "snapshot")
            finally:
                host.close()
    return Snapshot.load(root / "snapshot")


@pytest.fixture(scope="module")
def sglang():
    standin = SglangStandin()
    yield standin
    standin.close()


class Figures:
    """The tier's figure lines, one JSON file per case under build/pulumi-figures (make test-pulumi prints them)."""

    def add(self, name: str, **values) -> None:
        FIGURES.mkdir(parents=True, exist_ok=True)
        (FIGURES / f"{name}.json").write_text(json.dumps(values, sort_keys=False))


@pytest.fixture
def figures() -> Figures:
    return Figures()


def read_figures() -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(Path(FIGURES).glob("*.json"))}
