"""TrainingNode: a node that trains a DFlash drafter with speculators, from a bare machine to a running, observable job.

Apply order: pre-flight (GPUs, driver, disk) → the speculators, vLLM and monitor environments → the verifier and the
starting drafter → the drafter converted to a speculators checkpoint (its config.json checked against the stack
first) → the data set → the hidden-state server → the hidden-state check → the training job → the monitor.
Destroy stops the services and removes units and environments; models, the converted drafter, data and checkpoints
stay unless the config says otherwise. What speculators commands look like is its driver's
(gpuhosts/engines/speculators.py), and the hidden-state server's vLLM flags the vLLM driver's; `engine_invocations`
lists them for checking against the real parsers.

Each unit's plan is a module of its own (gpuhosts/plans/node_units.py lists them); this one derives what they share
(the layer ids, the environments, the downloads), puts them in one graph and sums the plan up.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from gpuhosts.compat import model_facts
from gpuhosts.engines import DRIVERS
from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.engines.vllm import VllmDriver
from gpuhosts.envspec import EnvSpec
from gpuhosts.observability import watch_trainer
from gpuhosts.plans.dataset_mix import plan_dataset_prepare
from gpuhosts.plans.dataset_stage import plan_dataset_stage
from gpuhosts.plans.drafter_convert import ConvertedDrafter, plan_drafter_convert
from gpuhosts.plans.hidden_state_gate import plan_hidden_state_check, state_probe
from gpuhosts.plans.hidden_state_server import SERVER_UNIT, HiddenStateServer, plan_hidden_state_server
from gpuhosts.plans.model_download import Download, plan_model_download
from gpuhosts.plans.monitoring_files import plan_monitoring
from gpuhosts.plans.node_preflight import PREFLIGHT, disk_needed_gb, plan_preflight
from gpuhosts.plans.node_units import TrainingData, dataset_key
from gpuhosts.plans.python_env import plan_env
from gpuhosts.plans.multi_node import plan_multi_node
from gpuhosts.plans.training_job import TRAINING_UNIT, TrainingJob, plan_training_job
from gpuhosts.plans.training_monitor import MONITOR_UNIT, plan_training_monitor
from gpuhosts.services import PackageSpec
from gpuhosts.dataset_size import estimate
from gpuhosts.training import (FLASK_VERSION, LayerIds, TrainerStack, TrainingConfig, layer_ids, mix_overlaps,
                               source_files)
from gpuhosts.units import Group, UnitGraph, within


@dataclass(frozen=True)
class TrainingEnvs:
    """The node's environments: speculators (its repository's scripts checked out beside it), the hidden-state
    server's vLLM, and the monitor's Flask."""

    speculators: EnvSpec
    vllm: EnvSpec
    monitor: EnvSpec

    def items(self) -> list[tuple[str, EnvSpec]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def _package_env(name: str, spec: PackageSpec, requirement: str, package: str, python: str,
                 checkout_url: str | None = None, checkout_ref: str | None = None) -> EnvSpec:
    return EnvSpec(name=name, requirement=requirement, package=package, release=spec.version,
                   from_git=spec.git_ref is not None, python=python, checkout_url=checkout_url,
                   checkout_ref=checkout_ref if checkout_url else None)


def training_envs(training: TrainingConfig) -> TrainingEnvs:
    vllm, speculators = DRIVERS[VllmDriver.name], training.speculators
    return TrainingEnvs(
        speculators=_package_env("speculators", speculators, speculators_driver.requirement(speculators),
                                 speculators_driver.PACKAGE, training.python,
                                 checkout_url=speculators.repository or speculators_driver.REPOSITORY,
                                 checkout_ref=speculators_driver.scripts_ref(speculators)),
        vllm=_package_env("vllm", training.vllm, vllm.requirement(training.vllm), vllm.package, training.python),
        monitor=EnvSpec(name="monitor", requirement=f"flask=={FLASK_VERSION}", package="flask",
                        release=FLASK_VERSION, from_git=False, python=training.python, needs_hf=False))


@dataclass(frozen=True)
class TrainingPlan:
    """Everything the node receives as a unit graph; the component and the offline plan both read it."""

    graph: UnitGraph
    ids: LayerIds
    summary: dict
    invocations: tuple[speculators_driver.Invocation, ...] = ()
    # The data set the node prepares from a mix, with speculators' tokenizer call; None for a staged one.
    prepared: TrainingData | None = None


def plan_training_node(stack: TrainerStack) -> TrainingPlan:
    training = stack.training
    verifier_dir, drafter_dir = stack.model_dir(training.verifier), stack.model_dir(training.drafter)
    num_verifier_layers = training.verifier.num_layers or model_facts(training.verifier.repo).num_layers
    if num_verifier_layers is None:
        raise ValueError(f"gpuhosts:training.verifier.numLayers: {training.verifier.repo} is not in the model table; "
                         "give its num_hidden_layers")
    ids = layer_ids(num_verifier_layers, training.hyper.num_layers, training.drafter.target_layer_ids)
    speculators_driver.row(training.speculators.version)  # a release no row covers stops the plan with the reason

    envs = training_envs(training)
    env_steps = {name: plan_env(f"env-{name}", env, None, (PREFLIGHT,)) for name, env in envs.items()}
    downloads = {
        "verifier": Download(training.verifier, ("training",), "speculators", None,
                             {"num_layers": num_verifier_layers}, verifier_dir),
        "drafter": Download(training.drafter, ("training",), "speculators", None,
                            {"target_layer_ids": list(ids.drafter)}, drafter_dir),
    }
    # A download needs only the node's pre-flight: it brings its own `hf`.
    download_steps = {name: plan_model_download(None, d, (PREFLIGHT,)) for name, d in downloads.items()}
    verifier_step, speculators_step = download_steps["verifier"].key, env_steps["speculators"].key

    preflight = plan_preflight(stack)
    key = dataset_key(training.dataset.name)
    # A stack declares either the pre-made `source` (DatasetStage) or a `mix` the node prepares (DatasetPrepare).
    server = plan_hidden_state_server(stack, ids, envs.speculators, envs.vllm,
                                      (env_steps["vllm"].key, speculators_step, verifier_step))
    probe = state_probe(stack, server, envs.vllm, ids)
    check = plan_hidden_state_check(server, probe)
    if training.dataset.mix is not None:
        # From speculators 0.8.1 the data step has the verifier's vLLM server render each conversation: the
        # hidden-state server is that server, so the data waits for its check (the server answers).
        renders = speculators_driver.row(training.speculators.version).prepare == "cli"
        data = plan_dataset_prepare(stack, key, envs.speculators, verifier_dir,
                                    (PREFLIGHT, speculators_step, verifier_step, *((check.key,) if renders else ())),
                                    render_endpoint=server.url if renders else None)
    else:
        data = plan_dataset_stage(stack, key, (PREFLIGHT,))
    drafter = plan_drafter_convert(stack, ids, envs.speculators,
                                   (speculators_step, verifier_step, download_steps["drafter"].key))
    job = plan_training_job(stack, ids, num_verifier_layers, envs.speculators, data, drafter, server, probe,
                            (check.key, data.unit.key, drafter.unit.key, speculators_step))
    # The monitor only reads the training's log and checkpoints: it waits for its environment alone.
    monitor = plan_training_monitor(stack, envs.monitor, job.log, server.url, (env_steps["monitor"].key,))

    # The exporters wait for the pre-flight alone, which has seen the driver the DCGM exporter reads.
    watching = (plan_monitoring(watch_trainer(stack, stack.monitoring), (PREFLIGHT,), (PREFLIGHT,))
                if stack.monitoring is not None else [])

    # The resource tree: the job with its data and starting drafter, the server with its check, the monitor; the
    # pre-flight, the shared environment and the weights stay under the node, as several of them read those.
    job_at, server_at, monitor_at = ((("TrainingJobStack", "training"),), (("HiddenStateServerStack", "hidden-states"),),
                                     (("MonitorStack", "monitor"),))
    graph = UnitGraph([preflight, env_steps["speculators"], *within(server_at, [env_steps["vllm"]]),
                       *within(monitor_at, [env_steps["monitor"]]), *download_steps.values(),
                       *within(job_at, [drafter.unit, data.unit]), *within(server_at, [server.unit, check]),
                       *within(job_at, [job.unit]), *within(monitor_at, [monitor]), *watching],
                      [Group(job_at, {"checkpoints": stack.checkpoints, "log": job.log, "dataset": data.data_path})])
    # scripts/prepare_data.py (0.7) is checked against v0.7.0's parser by tests/test_dataset_prepare_unit.py;
    # `speculators prepare-data` (0.8.1 and later) is a console script, checked with the others.
    cli_data = data.invocation is not None and data.invocation.program == "speculators prepare-data"
    return TrainingPlan(graph=graph, ids=ids,
                        summary=summarize(stack, ids, num_verifier_layers, envs, data, drafter, server, job),
                        invocations=(drafter.invocation, server.launch, server.served, job.invocation,
                                     *((job.smoke,) if job.smoke else ()), *((data.invocation,) if cli_data else ())),
                        prepared=data if data.invocation is not None else None)


def summarize(stack: TrainerStack, ids: LayerIds, num_verifier_layers: int, envs: TrainingEnvs, data: TrainingData,
              drafter: ConvertedDrafter, server: HiddenStateServer, job: TrainingJob) -> dict:
    """The node as a reviewer checks it: derived directories, layer ids, command lines and what destroy keeps."""
    node, training = stack.node, stack.training
    verifier_dir, drafter_dir, dataset_dir = (stack.model_dir(training.verifier), stack.model_dir(training.drafter),
                                              stack.dataset_dir)
    save, monitor, dataset = stack.checkpoints, training.monitor, training.dataset
    return {
        "driver": node.driver_version,
        "gpus": {"count": node.gpus.count, "model": node.gpus.model,
                 "server": list(training.server.gpus), "training": list(training.training_gpus)},
        "layerIds": {"drafterConfig": list(ids.drafter), "trainer": list(ids.trainer), "serverExtracts": list(ids.server)},
        "verifier": {"repo": training.verifier.repo, "dir": verifier_dir, "layers": num_verifier_layers},
        "startFrom": {"repo": training.drafter.repo, "dir": drafter_dir, "gated": training.drafter.gated},
        "environments": {name: env.requirement for name, env in envs.items()},
        "convert": {"dir": drafter.dir, "argv": drafter.invocation.words, "checks": drafter.checks},
        "server": {"unit": SERVER_UNIT, "url": server.url, "argv": server.launch.words,
                   "environment": server.environment},
        "training": {"unit": TRAINING_UNIT, "script": job.script, "nprocPerNode": len(training.training_gpus),
                     "program": job.invocation.program, "args": list(job.args), "startFrom": drafter.dir,
                     "checkpoints": save, "log": job.log,
                     **({"smoke": {"samples": training.smoke.samples, "epochs": training.smoke.epochs,
                                   "data": data.smoke_path, "checkpoints": stack.smoke_checkpoints,
                                   "argv": list(job.smoke.words)}} if training.smoke else {})},
        **({"multiNode": plan_multi_node(stack, job.invocation, server.url)} if stack.multi_node else {}),
        "dataset": {"dir": dataset_dir, "samples": dataset.samples, "source": dataset.source,
                    **({"mix": [{"source": s.name, "count": s.count, "converter": s.converter,
                                 "files": source_files(s)} for s in dataset.mix],
                        "seed": dataset.seed,
                        "expectedTotal": sum(s.count for s in dataset.mix),
                        "toolCalling": dataset.tool_calling_samples,
                        "overlaps": [{"sources": [o.first, o.later], "share": o.share,
                                      "duplicatesDropped": o.duplicates, "distinctLeft": o.distinct}
                                     for o in mix_overlaps(dataset)]} if dataset.mix else {}),
                    **dataset_lengths_summary(stack)},
        "monitor": {"unit": MONITOR_UNIT, "listen": f"{monitor.bind}:{monitor.port}",
                    "token": f"gpuhosts:{monitor.token_secret}" if monitor.token_secret else None},
        "diskNeededGb": disk_needed_gb(stack),
        "keptOnDestroy": [d for d, delete in ((verifier_dir, training.verifier.delete_on_destroy),
                                              (drafter_dir, training.drafter.delete_on_destroy),
                                              (drafter.dir, training.drafter.delete_on_destroy),
                                              (dataset_dir, dataset.delete_on_destroy),
                                              (save, training.delete_checkpoints_on_destroy),
                                              (stack.smoke_checkpoints, training.delete_checkpoints_on_destroy))
                           if d and not delete],
    }


def dataset_lengths_summary(stack: TrainerStack) -> dict:
    """The data set's size on disk, and for a mix how much of it is longer than the training's sequence and what
    becomes of it, per source with where its lengths come from."""
    found = estimate(stack.training)
    if found is None:
        return {"sizeGb": stack.training.dataset.size_gb}
    return {"sizeGb": round(found.size_gb, 1),
            "tokens": round(found.tokens),
            "bytesPerStoredToken": found.token_bytes,
            "messageBytesPerToken": found.message_bytes,
            "bytesMeasured": found.measured,
            "longerThanMaxSeqLen": {
                "maxSeqLen": found.max_seq_len, "policy": found.policy, "share": round(found.over, 4),
                "samples": round(found.over * found.samples),
                "sources": [{"source": s.index, "repo": s.repo, "share": round(s.over, 4),
                             "storedTokensMean": round(s.stored, 1), "tokensMean": round(s.whole, 1),
                             "lengths": s.basis} for s in found.sources]}}


def engine_invocations(stack: TrainerStack) -> list[dict]:
    """Every speculators and vLLM command the node runs, as its own parser receives it: name, package, version,
    program, argv (the words after the interpreter or script), environment."""
    return [invocation.as_dict() for invocation in plan_training_node(stack).invocations]
