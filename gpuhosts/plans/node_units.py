"""The shapes a training node's own units share: a systemd service with its files, a check that only measures, and
a data set with where the training reads it. Each unit's plan is a module of its own (node_preflight,
drafter_convert, dataset_stage, dataset_mix, hidden_state_server, hidden_state_gate, training_job, training_monitor);
gpuhosts/plans/training_node.py puts them in one graph."""

from __future__ import annotations

from dataclasses import dataclass

from gpuhosts.engines.speculators import Invocation
from gpuhosts.facts import Fact, desired, files_facts, render_probe, systemd_unit_facts
from gpuhosts.render import HostFile
from gpuhosts.units import Unit


def service_unit(key: str, kind: str, unit_name: str, files: list[HostFile], ensure: str, teardown: str,
                 needs: tuple[str, ...], stdin_secret: str | None = None, keeps: str = "") -> Unit:
    unit_file = next((f for f in files if f.path == f"/etc/systemd/system/{unit_name}"), None)
    if unit_file is None:
        raise ValueError(f"unit {key}: {unit_name} is not among the files it installs")
    facts = [*files_facts(files), *systemd_unit_facts(unit_file)]
    return Unit(key=key, kind=kind, ensure=ensure, teardown=teardown, probe=render_probe(key, facts),
                desired=desired(facts), needs=needs, files=tuple(files), stdin_secret=stdin_secret,
                undoes=f"{unit_name} stopped and removed with its {len(files)} file(s); {keeps}")


def check_unit(key: str, kind: str, ensure: str, teardown: str, needs: tuple[str, ...],
               facts: list[Fact] = ()) -> Unit:
    """A check only measures; its facts are what a refresh can read again cheaply of what it checked."""
    facts = list(facts)
    return Unit(key=key, kind=kind, ensure=ensure, teardown=teardown, probe=render_probe(key, facts),
                desired=desired(facts), needs=needs, undoes="nothing: it only checks")


@dataclass(frozen=True)
class TrainingData:
    """The data set's unit (DatasetStage or DatasetPrepare), what train.py --data-path reads, the file that says it
    is complete, and speculators' tokenizer call where the node prepares it."""

    unit: Unit
    data_path: str
    ready: str
    invocation: Invocation | None = None
    # The smoke run's few samples, tokenized beside the full set (training.smoke).
    smoke_path: str | None = None


def dataset_key(name: str) -> str:
    return "dataset-" + name.replace(".", "-").replace("_", "-")
