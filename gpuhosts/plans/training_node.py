"""TrainingNode: a node that trains a DFlash drafter with speculators, from a bare machine to a running, observable job.

Apply order: pre-flight (GPUs, driver, disk) → the speculators, vLLM and monitor environments → the verifier and the
starting drafter → the drafter converted to a speculators checkpoint (its config.json checked against the stack
first) → the data set → the hidden-state server → the hidden-state check → the training job → the monitor.
Destroy stops the services and removes units and environments; models, the converted drafter, data and checkpoints
stay unless the config says otherwise. What speculators commands look like is its driver's
(gpuhosts/engines/speculators.py); `engine_invocations` lists them for checking against the real parsers.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.hostside import dataset_prepare, drafter_config, hidden_state_check
from gpuhosts.plans.model_download import HF_TOKEN, Download, plan_model_download
from gpuhosts.plans.python_env import plan_env
from gpuhosts.compat import model_facts
from gpuhosts.envspec import EnvSpec
from gpuhosts.facts import Fact, desired, files_facts, render_probe, systemd_fact
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.render import HostFile, render
from gpuhosts.training import FLASK_VERSION, LayerIds, TrainerStack, declared_drafter, layer_ids
from gpuhosts.units import Group, Unit, UnitGraph, within

SPECULATORS_REPOSITORY = "https://github.com/vllm-project/speculators"
VLLM_REPOSITORY = "https://github.com/vllm-project/vllm"
SERVER_UNIT = "gpuhosts-hidden-state-server.service"
TRAINING_UNIT = "gpuhosts-dflash-training.service"
MONITOR_UNIT = "gpuhosts-training-monitor.service"
LIB_DIR = "/usr/local/lib/gpuhosts"
CHECK_SCRIPT = f"{LIB_DIR}/check-hidden-states.py"
DRAFTER_CHECK_SCRIPT = f"{LIB_DIR}/check-drafter-config.py"
PREPARE_SCRIPT = f"{LIB_DIR}/dataset-prepare.py"
# The node-side converter and mixer: gpuhosts/hostside/dataset_prepare.py runs there verbatim.
PREPARE_SOURCE = Path(dataset_prepare.__file__)
# speculators' tokenizer step, in the checkout of the pinned release (v0.7.0 scripts/prepare_data.py).
PREPARE_DATA_SCRIPT = "scripts/prepare_data.py"
MONITOR_TOKEN = "/etc/gpuhosts/monitor.token"
MONITOR_PACKAGE = Path(__file__).resolve().parent.parent.parent / "gpuhosts_monitor"
PROBE_PROMPT = "Explain in one sentence why the sky is blue."
READY_TIMEOUT_S = 1800
# How long the check waits for vLLM's writer to release a probe's <file>.lock after the response.
WRITE_TIMEOUT_S = 120


def _package_env(name: str, package: str, spec, repository: str, python: str, *, checkout: bool = False) -> EnvSpec:
    repository = spec.repository or repository
    requirement = speculators_driver.requirement(spec) if package == speculators_driver.PACKAGE else \
        f"{package} @ git+{repository}@{spec.git_ref}" if spec.git_ref else f"{package}=={spec.version}"
    ref = spec.git_ref or f"refs/tags/v{spec.version}"
    return EnvSpec(name=name, requirement=requirement, package=package, release=spec.version,
                   from_git=spec.git_ref is not None, python=python,
                   checkout_url=repository if checkout else None, checkout_ref=ref if checkout else None)

@dataclass(frozen=True)
class TrainingPlan:
    """Everything the node receives as a unit graph; the component and the offline plan both read it."""

    graph: UnitGraph
    ids: LayerIds
    summary: dict
    invocations: tuple[speculators_driver.Invocation, ...] = ()
    prepared: "PreparedDataset | None" = None

def _service_unit(key: str, kind: str, unit_name: str, files: list[HostFile], ensure: str, teardown: str,
                  needs: tuple[str, ...], stdin_secret: str | None = None, keeps: str = "") -> Unit:
    facts = [*files_facts(files), systemd_fact(unit_name)]
    return Unit(key=key, kind=kind, ensure=ensure, teardown=teardown, probe=render_probe(key, facts),
                desired=desired(facts), needs=needs, files=tuple(files), stdin_secret=stdin_secret,
                undoes=f"{unit_name} stopped and removed with its {len(files)} file(s); {keeps}")

def _check_unit(key: str, kind: str, ensure: str, teardown: str, needs: tuple[str, ...]) -> Unit:
    # A check only measures: nothing of its own on the node can drift.
    return Unit(key=key, kind=kind, ensure=ensure, teardown=teardown, probe=render_probe(key, []), needs=needs,
                undoes="nothing: it only checks")

def plan_training_node(stack: TrainerStack) -> TrainingPlan:
    node, training = stack.node, stack.training
    verifier_dir, drafter_dir = stack.model_dir(training.verifier), stack.model_dir(training.drafter)
    verifier_facts = model_facts(training.verifier.repo)
    num_verifier_layers = training.verifier.num_layers or verifier_facts.num_layers
    if num_verifier_layers is None:
        raise ValueError(f"gpuhosts:training.verifier.numLayers: {training.verifier.repo} is not in the model table; "
                         "give its num_hidden_layers")
    ids = layer_ids(num_verifier_layers, training.hyper.num_layers, training.drafter.target_layer_ids)
    version = training.speculators.version
    speculators_driver.row(version)  # a release no row covers stops the plan with the reason

    envs = {
        "speculators": _package_env("speculators", "speculators", training.speculators, SPECULATORS_REPOSITORY,
                                    training.python, checkout=True),
        "vllm": _package_env("vllm", "vllm", training.vllm, VLLM_REPOSITORY, training.python),
        "monitor": EnvSpec(name="monitor", requirement=f"flask=={FLASK_VERSION}", package="flask",
                           release=FLASK_VERSION, from_git=False, python=training.python, needs_hf=False),
    }
    env_steps = {name: plan_env(f"env-{name}", env, None, ("preflight",)) for name, env in envs.items()}
    speculators, vllm_env = envs["speculators"], envs["vllm"]

    verifier_check = {"num_layers": num_verifier_layers}
    drafter_check = {"target_layer_ids": list(ids.drafter)}
    downloads = {
        "verifier": Download(training.verifier, ("training",), "speculators", None, verifier_check, verifier_dir),
        "drafter": Download(training.drafter, ("training",), "speculators", None, drafter_check, drafter_dir),
    }
    # A download needs only the node's pre-flight: it brings its own `hf`.
    download_steps = {name: plan_model_download(None, d, ("preflight",)) for name, d in downloads.items()}

    dataset_dir = stack.dataset_dir
    dataset_key = "dataset-" + training.dataset.name.replace(".", "-").replace("_", "-")
    # A stack declares either the pre-made `source` (DatasetStage) or a `mix` the node prepares (DatasetPrepare).
    prepared = plan_dataset_prepare(stack, dataset_key, envs["speculators"], verifier_dir,
                                    ("preflight", "env-speculators", download_steps["verifier"].key)) \
        if training.dataset.mix is not None else None
    # What train.py --data-path reads, and the file that says it is complete.
    data_path, data_ready = ((prepared.data_path, prepared.ready) if prepared else
                             (dataset_dir, f"{dataset_dir}/SHA256SUMS"))
    if prepared:
        dataset = prepared.unit
    else:
        manifest = f"{dataset_dir}/SHA256SUMS"
        dataset_facts = [
            Fact(f"manifest {manifest}", f'sha256sum <"$root"{shlex.quote(manifest)} | cut -d" " -f1 || echo missing',
                 training.dataset.manifest_sha256),
            # Presence only: hashing a data set of this size is the ensure's work, not a probe's.
            Fact(f"files of {manifest}", f'dataset_files_state "$root"{shlex.quote(dataset_dir)}', "all present"),
        ]
        dataset = Unit(key=dataset_key, kind="DatasetStage",
                       ensure=render("training_node/dataset-stage.sh.j2", unit=dataset_key,
                                     dataset=training.dataset, target=dataset_dir),
                       teardown=render("training_node/dataset-teardown.sh.j2", unit=dataset_key,
                                       dataset=training.dataset, target=dataset_dir),
                       probe=render_probe(dataset_key, dataset_facts, prelude=render("training_node/dataset-probe.sh.j2")),
                       desired=desired(dataset_facts), needs=("preflight",),
                       undoes=f"data set {training.dataset.name} in {dataset_dir} "
                       + ("deleted (dataset.deleteOnDestroy)" if training.dataset.delete_on_destroy else
                          "kept (dataset.deleteOnDestroy is false)"))

    storage = node.storage
    need_gb = int((training.verifier.size_gb or verifier_facts.size_gb or 60)
                  + (training.drafter.size_gb or model_facts(training.drafter.repo).size_gb or 5)
                  + training.dataset.size_gb + training.checkpoints_reserve_gb + 0.999)
    preflight = _check_unit("preflight", "Preflight",
                            render("training_node/preflight.sh.j2", unit="preflight", node=node, need_gb=need_gb,
                                   present_dirs=[verifier_dir, drafter_dir, dataset_dir, stack.checkpoints]),
                            render("training_node/preflight-teardown.sh.j2", unit="preflight"), ())

    # --- the drafter, converted ------------------------------------------------------------------------------
    # z-lab's checkpoint is not a speculators one: train.py --from-pretrained loads only what `speculators convert`
    # (or, in 0.7.x, its convert_model) made of it, which keeps z-lab's layer_types, sliding_window and mask token.
    converted_dir = f"{drafter_dir}.speculators"
    part_dir = f"{converted_dir}.part"
    convert = speculators_driver.convert(version, speculators.venv, drafter_dir, verifier_dir, part_dir)
    drafter_check_script = HostFile(DRAFTER_CHECK_SCRIPT, render(
        "training_node/check-drafter-config.py.j2", path=DRAFTER_CHECK_SCRIPT,
        source=Path(drafter_config.__file__).read_text().rstrip("\n")), "0755")
    declared = declared_drafter(training, ids)
    convert_marker = f"{training.drafter.repo}@{training.drafter.revision} {speculators.requirement}"
    convert_facts = [*files_facts([drafter_check_script]),
                     Fact(f"converted {converted_dir}",
                          f'cat "$root"{shlex.quote(converted_dir + "/.gpuhosts-convert")} || echo missing',
                          convert_marker)]
    convert_step = Unit(
        key="drafter-convert", kind="DrafterConvert",
        ensure=render("training_node/drafter-convert.sh.j2", unit="drafter-convert", drafter_repo=training.drafter.repo,
                      drafter_dir=drafter_dir, output=converted_dir, part=part_dir, marker=convert_marker,
                      program=convert.program, version=version, python=f"{speculators.venv}/bin/python",
                      check_script=DRAFTER_CHECK_SCRIPT, declared=declared, files=[drafter_check_script],
                      needs=[f"{drafter_dir}/.gpuhosts-download", f"{verifier_dir}/.gpuhosts-download", convert.command[0]],
                      environment=convert.environment, command=list(convert.command), argv=list(convert.argv)),
        teardown=render("training_node/drafter-convert-teardown.sh.j2", unit="drafter-convert", output=converted_dir,
                        part=part_dir, remove=[DRAFTER_CHECK_SCRIPT], lib_dir=LIB_DIR,
                        delete=training.drafter.delete_on_destroy),
        probe=render_probe("drafter-convert", convert_facts), desired=desired(convert_facts),
        needs=("env-speculators", download_steps["verifier"].key, download_steps["drafter"].key),
        files=(drafter_check_script,),
        undoes=f"check script {DRAFTER_CHECK_SCRIPT} removed; converted drafter {converted_dir} "
        + ("deleted (drafter.deleteOnDestroy)" if training.drafter.delete_on_destroy else "kept"))

    # --- the hidden-state server --------------------------------------------------------------------------------
    server = training.server
    states_dir = f"{storage}/hidden_states"
    server_url = f"http://127.0.0.1:{server.port}"
    server_env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, server.gpus)),
                  "HF_HUB_OFFLINE": "1",
                  # launch_vllm.py starts `vllm serve`: the vLLM environment's bin comes first.
                  "PATH": f"{vllm_env.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    vllm_args = ["--host", "127.0.0.1", "--port", str(server.port),
                 "--tensor-parallel-size", str(server.tensor_parallel_size)]
    if server.data_parallel_size > 1:
        vllm_args += ["--data-parallel-size", str(server.data_parallel_size)]
    vllm_args += ["--gpu-memory-utilization", format(server.mem_fraction, "g"),
                  "--max-model-len", str(server.max_model_len), *server.extra_args]
    launch = speculators_driver.launch(version, vllm_env.venv, speculators.checkout, verifier_dir, states_dir,
                                       ids.trainer, vllm_args, server_env)
    server_argv = launch.words
    server_unit = HostFile(f"/etc/systemd/system/{SERVER_UNIT}", render(
        "training_node/server.service.j2", vllm_version=training.vllm.version, gpus=server.gpus, ids=ids,
        verifier_repo=training.verifier.repo, workdir=speculators.checkout,
        environment=dict(sorted(server_env.items())), argv=server_argv))
    check_script = HostFile(CHECK_SCRIPT, render("training_node/check-hidden-states.py.j2", path=CHECK_SCRIPT,
                                                 source=Path(hidden_state_check.__file__).read_text().rstrip("\n")), "0755")
    server_step = _service_unit(
        "hidden-state-server", "HiddenStateServer", SERVER_UNIT, [server_unit, check_script],
        render("training_node/unit.sh.j2", unit="hidden-state-server", unit_name=SERVER_UNIT,
                      summary=f"The hidden-state server on GPUs {list(server.gpus)}.", files=[server_unit, check_script],
                      needs=[launch.command[1], f"{verifier_dir}/.gpuhosts-download"],
                      secret_file=None),
        render("training_node/unit-teardown.sh.j2", unit="hidden-state-server", unit_name=SERVER_UNIT,
               keeps="the hidden states it cached are the training's to delete.",
               remove=[server_unit.path, check_script.path], delete_dirs=[]),
        ("env-vllm", "env-speculators", download_steps["verifier"].key),
        keeps=f"hidden states in {states_dir} kept; verifier weights kept by their own unit")

    probe = dict(server_url=server_url, states_dir=states_dir, ready_timeout_s=READY_TIMEOUT_S,
                 write_timeout_s=WRITE_TIMEOUT_S,
                 python=f"{vllm_env.venv}/bin/python", check_script=CHECK_SCRIPT,
                 probe_request=json.dumps({"model": verifier_dir, "prompt": PROBE_PROMPT, "max_tokens": 1}))
    check = _check_unit("hidden-state-check", "HiddenStateCheck",
                        render("training_node/hidden-state-check.sh.j2", unit="hidden-state-check",
                               server_digest=server_step.digest, **probe),
                        render("training_node/preflight-teardown.sh.j2", unit="hidden-state-check"),
                        (server_step.key,))

    # --- the training job -------------------------------------------------------------------------------------
    hyper = training.hyper
    save = stack.checkpoints
    family = (verifier_facts.family or "model").replace(".", "")
    script_path = f"{SERVICE_ROOT}/training/train_dflash_{family}.sh"
    # The trainer is the OpenAI client of the server: its endpoint is the base URL, /v1 included
    # (speculators v0.7.0.1 src/speculators/train/config/schema.py GenerationArgs.vllm_endpoint, default
    # http://localhost:8000/v1). The drafter's shape (layers, sliding window, layer types, mask token) comes from the
    # converted checkpoint: --from-pretrained refuses --num-layers and --sliding-window beside it.
    train_values = {"verifier": verifier_dir, "data": data_path, "endpoint": f"{server_url}/v1", "save": save,
                    "epochs": hyper.epochs, "lr": format(hyper.lr, "g"), "type": "dflash",
                    "block_size": hyper.block_size, "target_layer_ids": list(ids.trainer),
                    "seq_len": hyper.max_seq_len}
    train_env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, training.training_gpus)),
                 "HF_HUB_OFFLINE": "1"}
    trainer, arg_groups = speculators_driver.train(version, speculators.venv, speculators.checkout,
                                                   len(training.training_gpus), train_values, hyper.extra_args,
                                                   converted_dir, train_env)
    # The summary shows each group as the launch script spells it.
    args = [" ".join(shlex.quote(word) for word in group) for group in arg_groups]
    script = HostFile(script_path, render(
        "training_node/train.sh.j2", verifier_repo=training.verifier.repo, gpus=training.training_gpus,
        server_gpus=server.gpus, unit_name=TRAINING_UNIT, num_verifier_layers=num_verifier_layers,
        num_layers=hyper.num_layers, ids=ids, save=save, start_from=converted_dir,
        command=trainer.command, train_args=arg_groups, from_pretrained=trainer.argv[-2],
        environment=train_env, **probe), "0755")
    log = f"{save}/train.log"
    job_unit = HostFile(f"/etc/systemd/system/{TRAINING_UNIT}", render(
        "training_node/training.service.j2", verifier_repo=training.verifier.repo, gpus=training.training_gpus,
        server_unit=SERVER_UNIT, workdir=save, script=script_path, log=log))
    delete_dirs = [save] if training.delete_checkpoints_on_destroy else []
    job = _service_unit(
        "dflash-training", "TrainingJob", TRAINING_UNIT, [script, job_unit],
        render("training_node/unit.sh.j2", unit="dflash-training", unit_name=TRAINING_UNIT,
                      summary=f"torchrun on GPUs {list(training.training_gpus)}; checkpoints in {save}.",
                      files=[script, job_unit], needs=[data_ready, f"{converted_dir}/.gpuhosts-convert"],
                      secret_file=None, make_dirs=[save]),
        render("training_node/unit-teardown.sh.j2", unit="dflash-training", unit_name=TRAINING_UNIT,
               keeps="checkpoints stay unless trainingCheckpoints say otherwise.",
               remove=[job_unit.path, script.path], delete_dirs=delete_dirs,
               empty_dirs=[script_path.rsplit("/", 1)[0], SERVICE_ROOT]),
        (check.key, dataset.key, convert_step.key, "env-speculators"),
        keeps=f"checkpoints in {save} " + ("deleted (deleteCheckpointsOnDestroy)" if delete_dirs else "kept"))

    # --- the monitor ------------------------------------------------------------------------------------------
    monitor = training.monitor
    app_dir = f"{SERVICE_ROOT}/monitor/app"
    app_files = tuple(_monitor_file(app_dir, path) for path in sorted(MONITOR_PACKAGE.rglob("*"))
                      if path.is_file() and path.suffix in MONITOR_HEADERS)
    token_file = MONITOR_TOKEN if monitor.token_secret else None
    monitor_argv = [f"{envs['monitor'].venv}/bin/python", "-m", "gpuhosts_monitor", "--log", log, "--checkpoints", save,
                    "--server-url", server_url, "--bind", monitor.bind, "--port", str(monitor.port),
                    "--title", f"DFlash training of {training.verifier.repo}"]
    if token_file:
        monitor_argv += ["--token-file", token_file]
    monitor_unit = HostFile(f"/etc/systemd/system/{MONITOR_UNIT}", render(
        "training_node/monitor.service.j2", bind=monitor.bind, port=monitor.port, token_file=token_file,
        workdir=app_dir, argv=monitor_argv))
    monitor_step = _service_unit(
        "training-monitor", "TrainingMonitor", MONITOR_UNIT, [*app_files, monitor_unit],
        render("training_node/unit.sh.j2", unit="training-monitor", unit_name=MONITOR_UNIT,
                      summary=f"The monitoring web UI on {monitor.bind}:{monitor.port}.",
                      files=[*app_files, monitor_unit], needs=[f"{envs['monitor'].venv}/bin/python"],
                      secret_file=token_file),
        render("training_node/unit-teardown.sh.j2", unit="training-monitor", unit_name=MONITOR_UNIT,
               keeps="it only reads the training.", remove=[monitor_unit.path, *(f.path for f in app_files),
                                                          *([token_file] if token_file else [])],
               delete_dirs=[], empty_dirs=["/etc/gpuhosts"]),
        # The monitor only reads the training's log and checkpoints: it waits for its environment alone.
        ("env-monitor",), stdin_secret=monitor.token_secret,
        keeps="it only reads the training: logs and checkpoints untouched")

    summary = {
        "driver": node.driver_version,
        "gpus": {"count": node.gpus.count, "model": node.gpus.model,
                 "server": list(server.gpus), "training": list(training.training_gpus)},
        "layerIds": {"drafterConfig": list(ids.drafter), "trainer": list(ids.trainer), "serverExtracts": list(ids.server)},
        "verifier": {"repo": training.verifier.repo, "dir": verifier_dir, "layers": num_verifier_layers},
        "startFrom": {"repo": training.drafter.repo, "dir": drafter_dir, "gated": training.drafter.gated},
        "environments": {name: env.requirement for name, env in envs.items()},
        "convert": {"dir": converted_dir, "argv": convert.words, "checks": declared},
        "server": {"unit": SERVER_UNIT, "url": server_url, "argv": server_argv, "environment": server_env},
        "training": {"unit": TRAINING_UNIT, "script": script_path, "nprocPerNode": len(training.training_gpus),
                     "program": trainer.program, "args": args, "startFrom": converted_dir, "checkpoints": save,
                     "log": log},
        "dataset": {"dir": dataset_dir, "samples": training.dataset.samples, "source": training.dataset.source,
                    **({"mix": [{"source": s.name, "count": s.count, "converter": s.converter}
                                for s in training.dataset.mix],
                        "seed": training.dataset.seed,
                        "expectedTotal": sum(s.count for s in training.dataset.mix),
                        "toolCalling": training.dataset.tool_calling_samples} if training.dataset.mix else {})},
        "monitor": {"unit": MONITOR_UNIT, "listen": f"{monitor.bind}:{monitor.port}",
                    "token": f"gpuhosts:{monitor.token_secret}" if monitor.token_secret else None},
        "diskNeededGb": need_gb,
        "keptOnDestroy": [d for d, delete in ((verifier_dir, training.verifier.delete_on_destroy),
                                              (drafter_dir, training.drafter.delete_on_destroy),
                                              (converted_dir, training.drafter.delete_on_destroy),
                                              (dataset_dir, training.dataset.delete_on_destroy),
                                              (save, training.delete_checkpoints_on_destroy)) if not delete],
    }
    # The resource tree: the job with its data and starting drafter, the server with its check, the monitor; the
    # pre-flight, the shared environment and the weights stay under the node, as several of them read those.
    job_at, server_at, monitor_at = ((("TrainingJobStack", "training"),), (("HiddenStateServerStack", "hidden-states"),),
                                     (("MonitorStack", "monitor"),))
    graph = UnitGraph([preflight, env_steps["speculators"], *within(server_at, [env_steps["vllm"]]),
                       *within(monitor_at, [env_steps["monitor"]]), *download_steps.values(),
                       *within(job_at, [convert_step, dataset]), *within(server_at, [server_step, check]),
                       *within(job_at, [job]), *within(monitor_at, [monitor_step])],
                      [Group(job_at, {"checkpoints": save, "log": log, "dataset": data_path})])
    served = speculators_driver.Invocation(
        "vllm-serve", "vllm", training.vllm.version, "vllm serve", (f"{vllm_env.venv}/bin/python", "-m",
                                                                    "vllm.entrypoints.cli.main", "serve"),
        tuple(speculators_driver.served_vllm_argv(verifier_dir, states_dir, ids.server, vllm_args)), server_env)
    # prepare_data.py is checked against v0.7.0's parser by tests/test_dataset_prepare_unit.py; the captured flag
    # tables of engine_invocations' check do not cover it.
    return TrainingPlan(graph=graph, ids=ids, summary=summary, invocations=(convert, launch, served, trainer),
                        prepared=prepared)


# --- the data set prepared on the node -------------------------------------------------------------------------

@dataclass(frozen=True)
class PreparedDataset:
    """The DatasetPrepare unit, where the training reads its output, and speculators' tokenizer call in it."""

    unit: Unit
    data_path: str
    ready: str
    invocation: speculators_driver.Invocation


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
                            seq_length: int, seed: int) -> speculators_driver.Invocation:
    """speculators' scripts/prepare_data.py as the pinned release's parser takes it (v0.7.0 parse_args, lines
    79-182): --model is the verifier's directory, whose tokenizer and chat template format every row (the release
    has no chat-template flag of its own: load_and_preprocess_dataset reads the model's processor); --seq-length is
    the training's sequence, --seed the mix's."""
    argv = ("--model", verifier_dir, "--data", mix_file, "--output", output, "--seq-length", str(seq_length),
            "--seed", str(seed))
    return speculators_driver.Invocation(
        "speculators-prepare-data", speculators_driver.PACKAGE, version, PREPARE_DATA_SCRIPT,
        (f"{venv}/bin/python", f"{checkout}/{PREPARE_DATA_SCRIPT}"), argv,
        {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"})


def plan_dataset_prepare(stack: TrainerStack, key: str, speculators: EnvSpec, verifier_dir: str,
                         needs: tuple[str, ...]) -> PreparedDataset:
    """DatasetPrepare: the stack's `dataset.mix` downloaded (`hf download --repo-type dataset`), converted to
    ShareGPT rows per source, mixed, and tokenized by speculators into `<dataset dir>/tokenized`, which train.py
    reads. Each step's marker names its inputs, so a changed count or seed re-mixes and re-tokenizes while the
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
                                         training.hyper.max_seq_len, seed)
    # What the tokenized data is made of, as the plan knows it: the probe's fact and the ensure's marker.
    prepare_key = hashlib.sha256(json.dumps(
        {"spec": spec, "converters": [s.converter for s in sources], "script": script_digest,
         "verifier": f"{training.verifier.repo}@{training.verifier.revision}", "argv": list(invocation.argv),
         "speculators": speculators.requirement}, sort_keys=True).encode()).hexdigest()[:32]
    gated = any(s.gated for s in sources)
    secret = HF_TOKEN if gated else None
    facts = [*files_facts([script]),
             Fact(f"prepared {tokenized}", f'cat "$root"{shlex.quote(tokenized + "/.gpuhosts-prepare")} || echo missing',
                  prepare_key),
             Fact(f"mix of {tokenized}", f'prepared_state "$root"{shlex.quote(target)}', "tokenized from the mix")]
    values = dict(unit=key, name=dataset.name, target=target, seed=seed, version=training.speculators.version,
                  python=f"{speculators.venv}/bin/python", hf=f"{speculators.venv}/bin/hf", script=PREPARE_SCRIPT,
                  script_digest=script_digest, spec=spec, prepare_key=prepare_key, files=[script], secret=secret,
                  needs=[f"{verifier_dir}/.gpuhosts-download", invocation.command[1], f"{speculators.venv}/bin/hf"],
                  sources=[dict(name=s.name, repo=s.repo, revision=s.revision, split=s.split, subset=s.subset or "",
                                data_files=list(s.data_files), converter=s.converter, gated=s.gated, dir=d)
                           for s, d in zip(sources, dirs)],
                  command=list(invocation.command), argv=list(invocation.argv), environment=invocation.environment)
    unit = Unit(
        key=key, kind="DatasetPrepare",
        ensure=render("training_node/dataset-prepare.sh.j2", **values),
        teardown=render("training_node/dataset-prepare-teardown.sh.j2", unit=key, name=dataset.name, target=target,
                        remove=[PREPARE_SCRIPT], lib_dir=LIB_DIR, delete=dataset.delete_on_destroy),
        probe=render_probe(key, facts, prelude=render("training_node/dataset-prepare-probe.sh.j2")),
        desired=desired(facts), needs=needs, files=(script,), stdin_secret=secret,
        undoes=f"script {PREPARE_SCRIPT} removed; data set {dataset.name} prepared in {target} "
        + ("deleted (dataset.deleteOnDestroy)" if dataset.delete_on_destroy else
           "kept (dataset.deleteOnDestroy is false)"))
    return PreparedDataset(unit=unit, data_path=tokenized, ready=f"{tokenized}/.gpuhosts-prepare",
                           invocation=invocation)


def engine_invocations(stack: TrainerStack) -> list[dict]:
    """Every speculators and vLLM command the node runs, as its own parser receives it: name, package, version,
    program, argv (the words after the interpreter or script), environment."""
    return [invocation.as_dict() for invocation in plan_training_node(stack).invocations]


MONITOR_HEADERS = {".py": "# {}", ".html": "<!-- {} -->", ".css": "/* {} */", ".js": "// {}"}


def _monitor_file(app_dir: str, path: Path) -> HostFile:
    """A file of the monitor's package as the node receives it: the repository's file under a managed-by header."""
    relative = path.relative_to(MONITOR_PACKAGE).as_posix()
    header = MONITOR_HEADERS[path.suffix].format(f"managed by gpuhosts — gpuhosts_monitor/{relative} of the gpuhosts "
                                                 "repository; do not edit on the node")
    return HostFile(f"{app_dir}/gpuhosts_monitor/{relative}", header + "\n" + path.read_text())


# --- the component --------------------------------------------------------------------------------------------
