"""TrainingJob: torchrun of speculators' trainer on the training GPUs, as a systemd service whose launch script
waits for the hidden-state server, checks its states, runs the smoke run first where the stack asks for one (once
per value), and resumes from the newest checkpoint (else the converted drafter). The trainer's command line is the
speculators driver's (gpuhosts/engines/speculators.py `train`)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, replace

from gpuhosts.compat import model_facts
from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.envspec import EnvSpec
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.plans.drafter_convert import ConvertedDrafter
from gpuhosts.plans.hidden_state_gate import StateProbe
from gpuhosts.plans.hidden_state_server import SERVER_UNIT, HiddenStateServer
from gpuhosts.plans.node_units import TrainingData, service_unit
from gpuhosts.render import HostFile, render
from gpuhosts.training import LayerIds, TrainerStack
from gpuhosts.units import Unit

KEY = "dflash-training"
TRAINING_UNIT = "gpuhosts-dflash-training.service"


@dataclass(frozen=True)
class TrainingJob:
    unit: Unit
    invocation: speculators_driver.Invocation
    # Each argument group as the launch script spells it, one flag with its words.
    args: tuple[str, ...]
    script: str
    log: str
    # The smoke run's command line (training.smoke), run before the full one; None without smoke.
    smoke: speculators_driver.Invocation | None = None


def plan_training_job(stack: TrainerStack, ids: LayerIds, num_verifier_layers: int, speculators: EnvSpec,
                      data: TrainingData, drafter: ConvertedDrafter, server: HiddenStateServer, probe: StateProbe,
                      needs: tuple[str, ...]) -> TrainingJob:
    training, hyper = stack.training, stack.training.hyper
    save = stack.checkpoints
    family = (model_facts(training.verifier.repo).family or "model").replace(".", "")
    script_path = f"{SERVICE_ROOT}/training/train_dflash_{family}.sh"
    # The trainer is the OpenAI client of the server: its endpoint is the base URL, /v1 included
    # (speculators v0.7.0.1 src/speculators/train/config/schema.py GenerationArgs.vllm_endpoint, default
    # http://localhost:8000/v1).
    args = speculators_driver.TrainArgs(
        verifier=stack.model_dir(training.verifier), data=data.data_path, endpoint=f"{server.url}/v1", save=save,
        epochs=hyper.epochs, lr=hyper.lr, block_size=hyper.block_size, target_layer_ids=ids.trainer,
        total_seq_len=hyper.max_seq_len, loss_fn=hyper.loss_fn, max_anchors=hyper.max_anchors,
        per_position_loss_weight=hyper.per_position_loss_weight)
    environment = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                   "CUDA_VISIBLE_DEVICES": ",".join(map(str, training.training_gpus)), "HF_HUB_OFFLINE": "1"}
    trainer, groups = speculators_driver.train(training.speculators.version, speculators.venv, speculators.checkout,
                                               len(training.training_gpus), args, hyper.extra_args, drafter.dir,
                                               environment)
    # The smoke run: the same trainer on the few samples DatasetPrepare tokenized for it, from the converted drafter,
    # into a directory of its own beside the checkpoints (the full run resumes only from what lies in its own).
    smoke = smoke_trainer = None
    if training.smoke is not None:
        smoke_save = stack.smoke_checkpoints
        smoke_trainer, smoke_groups = speculators_driver.train(
            training.speculators.version, speculators.venv, speculators.checkout, len(training.training_gpus),
            replace(args, data=data.smoke_path, save=smoke_save, epochs=training.smoke.epochs), hyper.extra_args,
            drafter.dir, environment)
        smoke_trainer = replace(smoke_trainer, name=f"{smoke_trainer.name}-smoke")
        smoke = dict(save=smoke_save, samples=training.smoke.samples, epochs=training.smoke.epochs,
                     command=smoke_trainer.command, train_args=smoke_groups, from_pretrained=smoke_trainer.argv[-2],
                     key=hashlib.sha256(json.dumps([smoke_trainer.words, drafter.dir]).encode()).hexdigest()[:16])
    script = HostFile(script_path, render(
        "training_job/train.sh.j2", verifier_repo=training.verifier.repo, gpus=training.training_gpus,
        server_gpus=training.server.gpus, unit_name=TRAINING_UNIT, num_verifier_layers=num_verifier_layers,
        num_layers=hyper.num_layers, ids=ids, save=save, start_from=drafter.dir,
        command=trainer.command, train_args=groups, from_pretrained=trainer.argv[-2],
        environment=environment, smoke=smoke, **probe.values()), "0755")
    log = f"{save}/train.log"
    job_unit = HostFile(f"/etc/systemd/system/{TRAINING_UNIT}", render(
        "training_job/training.service.j2", verifier_repo=training.verifier.repo, gpus=training.training_gpus,
        server_unit=SERVER_UNIT, workdir=save, script=script_path, log=log))
    delete_dirs = [d for d in (save, smoke and smoke["save"]) if d] if training.delete_checkpoints_on_destroy else []
    unit = service_unit(
        KEY, "TrainingJob", TRAINING_UNIT, [script, job_unit],
        render("common/node-unit.sh.j2", unit=KEY, unit_name=TRAINING_UNIT,
               summary=f"torchrun on GPUs {list(training.training_gpus)}; checkpoints in {save}.",
               files=[script, job_unit], needs=[data.ready, f"{drafter.dir}/.gpuhosts-convert",
                                                *([f"{data.smoke_path}/.gpuhosts-prepare"] if smoke else [])],
               secret_file=None, make_dirs=[save]),
        render("common/node-unit-teardown.sh.j2", unit=KEY, unit_name=TRAINING_UNIT,
               keeps="checkpoints stay unless trainingCheckpoints say otherwise.",
               remove=[job_unit.path, script.path], delete_dirs=delete_dirs,
               empty_dirs=[script_path.rsplit("/", 1)[0], SERVICE_ROOT]),
        needs, keeps=f"checkpoints in {save} " + ("deleted (deleteCheckpointsOnDestroy)" if delete_dirs else "kept"))
    return TrainingJob(unit=unit, invocation=trainer, args=tuple(" ".join(shlex.quote(w) for w in g) for g in groups),
                       script=script_path, log=log, smoke=smoke_trainer)
