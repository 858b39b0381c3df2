"""DatasetPrepare: the stack's `dataset.mix` made into the training's data on the node — each source downloaded
(`hf download --repo-type dataset`), converted to ShareGPT rows, the rows mixed with the stack's seed, and the mix
tokenized by speculators into `<dataset dir>/tokenized`, which train.py reads. The converter and mixer is
gpuhosts/hostside/dataset_prepare.py, shipped verbatim.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.envspec import EnvSpec
from gpuhosts.facts import Fact, content_fact, desired, files_facts, render_probe
from gpuhosts.hostside import dataset_prepare
from gpuhosts.paths import LIB_DIR
from gpuhosts.plans.model_download import HF_TOKEN
from gpuhosts.plans.node_units import TrainingData
from gpuhosts.render import HostFile, render
from gpuhosts.training import TrainerStack
from gpuhosts.units import Unit

PREPARE_SCRIPT = f"{LIB_DIR}/dataset-prepare.py"
# The node-side converter and mixer: gpuhosts/hostside/dataset_prepare.py runs there verbatim.
PREPARE_SOURCE = Path(dataset_prepare.__file__)
# speculators' tokenizer step, in the checkout of the pinned release (v0.7.0 scripts/prepare_data.py).
PREPARE_DATA_SCRIPT = "scripts/prepare_data.py"
# The smoke run's samples, beside `tokenized`.
SMOKE_DIR = "tokenized-smoke"


def source_dir(target: str, source) -> str:
    """Where a source's download, conversion and marker live: a readable slug and a digest of the whole name, so
    that two sources differing in a character the slug drops cannot share a directory."""
    name = source.name + (f"/{source.subset}" if source.subset else "") + "".join(f" {f}" for f in source.data_files)
    slug = re.sub(r"[^a-z0-9]+", "-", f"{source.repo}-{source.split}".lower()).strip("-")[:48]
    return f"{target}/sources/{slug}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def mix_spec(seed: int, sources, target: str) -> dict:
    """The mixer's spec (dataset-prepare.py mix --spec): converted paths relative to the data set's directory, where
    the mix runs."""
    return {"seed": seed, "sources": [{"name": s.name, "count": s.count,
                                       "converted": source_dir(target, s)[len(target) + 1:] + "/converted.jsonl"}
                                      for s in sources]}


def prepare_data_invocation(version: str, venv: str, checkout: str, verifier_dir: str, mix_file: str, output: str,
                            seq_length: int, seed: int, max_samples: int | None = None,
                            render_endpoint: str | None = None) -> speculators_driver.Invocation:
    """speculators' scripts/prepare_data.py as the pinned release's parser takes it (v0.7.0 parse_args, lines
    79-182): --model is the verifier's directory, whose tokenizer and chat template format every row (the release
    has no chat-template flag of its own: load_and_preprocess_dataset reads the model's processor); --seq-length is
    the training's sequence, --seed the mix's; --max-samples, for the smoke run's few, keeps that many of the rows
    shuffled with the seed (src/speculators/data_generation/preprocessing.py load_and_preprocess_dataset, lines
    884-890)."""
    argv = ("--model", verifier_dir, "--data", mix_file, "--output", output, "--seq-length", str(seq_length),
            "--seed", str(seed)) + (("--max-samples", str(max_samples)) if max_samples is not None else ())
    if speculators_driver.row(version).prepare == "cli":
        # speculators 0.8.1 and later (src/speculators/cli/prepare_data.py): the same flags through the console
        # script, and every conversation rendered by the verifier's own vLLM server (--render-endpoint, its base
        # URL: data_generation/render_client.py posts to /v1/chat/completions/render, with no model name and no key)
        if render_endpoint is None:
            raise ValueError(f"speculators {version} prepares data through a vLLM server's render endpoint; the "
                             "plan gives none")
        return speculators_driver.Invocation(
            "speculators-prepare-data", speculators_driver.PACKAGE, version, "speculators prepare-data",
            (f"{venv}/bin/speculators", "prepare-data"), argv + ("--render-endpoint", render_endpoint),
            {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"})
    return speculators_driver.Invocation(
        "speculators-prepare-data", speculators_driver.PACKAGE, version, PREPARE_DATA_SCRIPT,
        (f"{venv}/bin/python", f"{checkout}/{PREPARE_DATA_SCRIPT}"), argv,
        {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"})


def plan_dataset_prepare(stack: TrainerStack, key: str, speculators: EnvSpec, verifier_dir: str,
                         needs: tuple[str, ...], render_endpoint: str | None = None) -> TrainingData:
    """Each step's marker names its inputs, so a changed count or seed re-mixes and re-tokenizes while the
    downloads and conversions stay."""
    training, dataset = stack.training, stack.training.dataset
    target = stack.dataset_dir
    sources = list(dataset.mix)
    seed = dataset.seed
    dirs = [source_dir(target, s) for s in sources]
    twice = next((s.name for s, d in zip(sources, dirs) if dirs.count(d) > 1), None)
    if twice:
        raise ValueError(f"gpuhosts:training.dataset.mix: {twice} is listed twice; give each source once with the "
                         "count it contributes")
    shebang, code = PREPARE_SOURCE.read_text().split("\n", 1)
    script = HostFile(PREPARE_SCRIPT, f"{shebang}\n# managed by gpuhosts — gpuhosts/hostside/dataset_prepare.py of the "
                                      f"gpuhosts repository verbatim; do not edit on the node\n{code}", "0755")
    script_digest = hashlib.sha256(script.content.encode()).hexdigest()
    spec = json.dumps(mix_spec(seed, sources, target), sort_keys=True, separators=(",", ":"))
    tokenized = f"{target}/tokenized"
    invocation = prepare_data_invocation(training.speculators.version, speculators.venv, speculators.checkout,
                                         verifier_dir, f"{target}/mix/mix.jsonl", f"{tokenized}.part",
                                         training.hyper.max_seq_len, seed, render_endpoint=render_endpoint)
    # What the tokenized data is made of, as the plan knows it: the probe's fact and the ensure's marker.
    def made_of(argv) -> str:
        return hashlib.sha256(json.dumps(
            {"spec": spec, "converters": [s.converter for s in sources], "script": script_digest,
             "verifier": f"{training.verifier.repo}@{training.verifier.revision}", "argv": list(argv),
             "speculators": speculators.requirement}, sort_keys=True).encode()).hexdigest()[:32]
    prepare_key = made_of(invocation.argv)
    # The smoke run's few samples, tokenized beside the full set from the same mix.
    smoke = None
    if training.smoke is not None:
        smoke_invocation = prepare_data_invocation(
            training.speculators.version, speculators.venv, speculators.checkout, verifier_dir,
            f"{target}/mix/mix.jsonl", f"{target}/{SMOKE_DIR}.part", training.hyper.max_seq_len, seed,
            training.smoke.samples, render_endpoint=render_endpoint)
        smoke = dict(dir=f"{target}/{SMOKE_DIR}", argv=list(smoke_invocation.argv), key=made_of(smoke_invocation.argv),
                     samples=training.smoke.samples)
    gated = any(s.gated for s in sources)
    secret = HF_TOKEN if gated else None
    facts = [*files_facts([script]),
             Fact(f"prepared {tokenized}", f'cat "$root"{shlex.quote(tokenized + "/.gpuhosts-prepare")} || echo missing',
                  prepare_key),
             Fact(f"mix of {tokenized}", f'prepared_state "$root"{shlex.quote(target)}', "tokenized from the mix"),
             content_fact(tokenized)]
    if smoke is not None:
        facts += [Fact(f"prepared {smoke['dir']}",
                       f'cat "$root"{shlex.quote(smoke["dir"] + "/.gpuhosts-prepare")} || echo missing', smoke["key"]),
                  Fact(f"mix of {smoke['dir']}", f'prepared_state "$root"{shlex.quote(target)} {SMOKE_DIR}',
                       "tokenized from the mix"), content_fact(smoke["dir"])]
    values = dict(unit=key, name=dataset.name, target=target, seed=seed, version=training.speculators.version,
                  python=f"{speculators.venv}/bin/python", hf=f"{speculators.venv}/bin/hf", script=PREPARE_SCRIPT,
                  script_digest=script_digest, spec=spec, prepare_key=prepare_key, files=[script], secret=secret,
                  needs=[f"{verifier_dir}/.gpuhosts-download",
                         invocation.command[0] if invocation.program == "speculators prepare-data"
                         else invocation.command[1], f"{speculators.venv}/bin/hf"],
                  sources=[dict(name=s.name, repo=s.repo, revision=s.revision, split=s.split, subset=s.subset or "",
                                data_files=list(s.data_files), converter=s.converter, gated=s.gated, dir=d)
                           for s, d in zip(sources, dirs)],
                  command=list(invocation.command), argv=list(invocation.argv), environment=invocation.environment,
                  smoke=smoke)
    unit = Unit(
        key=key, kind="DatasetPrepare",
        ensure=render("dataset_mix/dataset-prepare.sh.j2", **values),
        teardown=render("dataset_mix/dataset-prepare-teardown.sh.j2", unit=key, name=dataset.name, target=target,
                        remove=[PREPARE_SCRIPT], lib_dir=LIB_DIR, delete=dataset.delete_on_destroy),
        probe=render_probe(key, facts, prelude=render("dataset_mix/dataset-prepare-probe.sh.j2")),
        desired=desired(facts), needs=needs, files=(script,), stdin_secret=secret,
        content=(tokenized, *([smoke["dir"]] if smoke is not None else [])),
        undoes=f"script {PREPARE_SCRIPT} removed; data set {dataset.name} prepared in {target} "
        + ("deleted (dataset.deleteOnDestroy)" if dataset.delete_on_destroy else
           "kept (dataset.deleteOnDestroy is false)"))
    return TrainingData(unit=unit, data_path=tokenized, ready=f"{tokenized}/.gpuhosts-prepare", invocation=invocation,
                        smoke_path=smoke["dir"] if smoke else None)
