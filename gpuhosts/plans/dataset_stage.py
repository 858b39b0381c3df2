"""DatasetStage: a pre-made tokenized data set (`dataset.source`) staged on the node and checked against the
manifest the stack pins; the alternative to a mix the node prepares (gpuhosts/plans/dataset_mix.py)."""

from __future__ import annotations

import shlex

from gpuhosts.facts import Fact, content_fact, desired, render_probe
from gpuhosts.plans.node_units import TrainingData
from gpuhosts.render import render
from gpuhosts.training import TrainerStack
from gpuhosts.units import Unit


def plan_dataset_stage(stack: TrainerStack, key: str, needs: tuple[str, ...]) -> TrainingData:
    dataset, target = stack.training.dataset, stack.dataset_dir
    manifest = f"{target}/SHA256SUMS"
    facts = [
        Fact(f"manifest {manifest}", f'sha256sum <"$root"{shlex.quote(manifest)} | cut -d" " -f1 || echo missing',
             dataset.manifest_sha256),
        # Presence only: hashing a data set of this size is the ensure's work, not a probe's.
        Fact(f"files of {manifest}", f'dataset_files_state "$root"{shlex.quote(target)}', "all present"),
        # Each file by its size and a sampled digest against what staging recorded; `gpuhosts check --deep`
        # reads them whole.
        content_fact(target),
    ]
    unit = Unit(key=key, kind="DatasetStage",
                ensure=render("dataset_stage/dataset-stage.sh.j2", unit=key, dataset=dataset, target=target),
                teardown=render("dataset_stage/dataset-teardown.sh.j2", unit=key, dataset=dataset, target=target),
                probe=render_probe(key, facts, prelude=render("dataset_stage/dataset-probe.sh.j2")),
                desired=desired(facts), needs=needs, content=(target,),
                undoes=f"data set {dataset.name} in {target} "
                + ("deleted (dataset.deleteOnDestroy)" if dataset.delete_on_destroy else
                   "kept (dataset.deleteOnDestroy is false)"))
    return TrainingData(unit=unit, data_path=target, ready=manifest)
