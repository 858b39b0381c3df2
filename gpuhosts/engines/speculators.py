"""The speculators driver: how a training node converts, serves hidden states for, and trains a DFlash drafter.

vllm-project/speculators provides three programs a training node runs:

* **convert** — turns z-lab's DFlash checkpoint into a speculators checkpoint (its layer types, sliding window,
  mask token and weights kept), which `--from-pretrained` then loads;
* **launch** — `scripts/launch_vllm.py` of the repository (not in the wheel), run with the vLLM environment's
  Python: the hidden-state server;
* **train** — the trainer, under `torchrun`.

What changes between releases (which program converts, how training is started) is an `engines:` row of the
compatibility data (gpuhosts/compat-rules.yaml), keyed by a version range and citing the source it was read from;
the argv builders below hold what every row shares. Every trainer default that a release moved is rendered from
the stack (`training.hyper`), so a bump changes no training setting unseen; `gpuhosts upgrades` lists what else
it changes. A release no row covers is refused with the reason instead of being guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from packaging.specifiers import SpecifierSet

from gpuhosts.compat_data import engine_facts, release_commit

PACKAGE = "speculators"
REPOSITORY = "https://github.com/vllm-project/speculators"
ALGORITHM = "dflash"

# speculators 0.7.x has no CLI for DFlash conversion (its `speculators convert --algorithm` offers only eagle,
# eagle3 and mtp: src/speculators/__main__.py, v0.7.0.1), but its Python API does
# (src/speculators/convert/entrypoints.py convert_model, algorithm "dflash"). The words after `-c CODE` are
# model, verifier, algorithm and output path, in that order.
CONVERT_API_CODE = ("import sys; from speculators.convert import convert_model; "
                    "convert_model(model=sys.argv[1], verifier=sys.argv[2], algorithm=sys.argv[3], "
                    "output_path=sys.argv[4])")

# The train.py flags the node uses, by meaning (a field of TrainArgs, and the start checkpoint); a release that
# renames one changes its row's `flags`.
TRAIN_FLAGS = {
    "verifier": "--verifier-name-or-path", "data": "--data-path", "endpoint": "--vllm-endpoint",
    "save": "--save-path", "epochs": "--epochs", "lr": "--lr", "speculator_type": "--speculator-type",
    "block_size": "--block-size", "target_layer_ids": "--target-layer-ids", "total_seq_len": "--total-seq-len",
    "loss_fn": "--loss-fn", "max_anchors": "--max-anchors", "per_position_loss_weight": "--per-position-loss-weight",
    "from_pretrained": "--from-pretrained",
}


@dataclass(frozen=True, kw_only=True)
class TrainArgs:
    """What the trainer is given, by meaning (a key of TRAIN_FLAGS), in the order the launch script lists it. The
    drafter's shape (layers, sliding window, layer types, mask token) is not among them: it comes from the
    checkpoint it starts from, and --from-pretrained refuses --num-layers and --sliding-window beside it."""

    verifier: str
    data: str
    endpoint: str
    save: str
    epochs: int
    lr: float
    speculator_type: str = ALGORITHM
    block_size: int
    target_layer_ids: tuple[int, ...]
    total_seq_len: int
    loss_fn: str
    max_anchors: int
    per_position_loss_weight: str


@dataclass(frozen=True)
class Row:
    """What one range of speculators releases needs; `source` names where each fact was read."""

    versions: SpecifierSet
    convert: str  # "api": python -c CONVERT_API_CODE; "cli": the `speculators convert` console script
    train: str  # "script": <checkout>/scripts/train.py; "module": python -m speculators.train
    source: str
    # "script": <checkout>/scripts/prepare_data.py, which tokenizes with the verifier's own template; "cli":
    # `speculators prepare-data`, which has a vLLM server render each conversation (--render-endpoint)
    prepare: str = "script"
    flags: dict[str, str] = field(default_factory=lambda: dict(TRAIN_FLAGS))
    launch_script: str = "scripts/launch_vllm.py"

    @property
    def convert_program(self) -> str:
        return "speculators.convert.convert_model" if self.convert == "api" else "speculators convert"

    @property
    def train_program(self) -> str:
        return "scripts/train.py" if self.train == "script" else "speculators.train"


def row(version: str) -> Row:
    """What the compatibility data says of a release (`engines:` rows of package speculators), or ValueError."""
    facts = engine_facts(PACKAGE, version)
    if facts.convert is None or facts.train is None:
        raise ValueError(f"speculators {version} is in no checked row of gpuhosts/compat-rules.yaml (engines, package "
                         "speculators, with convert and train): check its convert and train programs against its "
                         "sources and add a row")
    return Row(versions=SpecifierSet(f"=={version}"), convert=facts.convert, train=facts.train,
               source="; ".join(facts.sources), prepare=facts.prepare or "script")


def requirement(spec) -> str:
    """What uv installs: the release, or a git ref of the repository."""
    source = spec.repository or REPOSITORY
    return f"{PACKAGE} @ git+{source}@{spec.git_ref}" if spec.git_ref else f"{PACKAGE}=={spec.version}"


@dataclass(frozen=True)
class Invocation:
    """One command the node runs: `command` (interpreter or console script and what precedes the program's own
    arguments) + `argv` (what the program's parser receives)."""

    name: str
    package: str
    version: str
    program: str
    command: tuple[str, ...]
    argv: tuple[str, ...]
    environment: dict[str, str]

    @property
    def words(self) -> list[str]:
        return [*self.command, *self.argv]

    def as_dict(self) -> dict:
        return {"name": self.name, "package": self.package, "version": self.version, "program": self.program,
                "argv": list(self.argv), "environment": dict(self.environment)}


def convert(version: str, venv: str, drafter_dir: str, verifier_dir: str, output_dir: str) -> Invocation:
    """z-lab's checkpoint → a speculators checkpoint in `output_dir`, on the CPU (no validation device)."""
    found = row(version)
    if found.convert == "api":
        command, argv = (f"{venv}/bin/python", "-c", CONVERT_API_CODE), (drafter_dir, verifier_dir, ALGORITHM,
                                                                       output_dir)
    else:
        command = (f"{venv}/bin/speculators", "convert")
        argv = (drafter_dir, "--verifier", verifier_dir, "--algorithm", ALGORITHM, "--output-path", output_dir)
    return Invocation("speculators-convert", PACKAGE, version, found.convert_program, command, argv,
                      {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"})


def launch(version: str, vllm_venv: str, checkout: str, verifier_dir: str, states_dir: str,
           trainer_ids: tuple[int, ...], vllm_args: list[str], environment: dict[str, str]) -> Invocation:
    """The hidden-state server: launch_vllm.py with the vLLM environment's Python; it appends the last layer to
    `trainer_ids` itself (--include-last-layer, default on) and passes the words after `--` to `vllm serve`."""
    found = row(version)
    argv = (verifier_dir, "--hidden-states-path", states_dir, "--target-layer-ids", *map(str, trainer_ids), "--",
            *vllm_args)
    return Invocation("speculators-launch-vllm", PACKAGE, version, found.launch_script,
                      (f"{vllm_venv}/bin/python", f"{checkout}/{found.launch_script}"), argv, environment)


def served_vllm_argv(verifier_dir: str, states_dir: str, server_ids: tuple[int, ...], vllm_args: list[str]) -> list[str]:
    """What launch_vllm.py hands `vllm serve` (speculators v0.7.0.1 scripts/launch_vllm.py main): the
    extract_hidden_states speculative config, the ExampleHiddenStatesConnector writing under `states_dir`, the
    words after `--`, and --no-enable-chunked-prefill."""
    import json

    speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(server_ids)}}}
    transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": states_dir}}
    argv = [verifier_dir, "--speculative_config", json.dumps(speculative), "--kv_transfer_config", json.dumps(transfer),
            *vllm_args]
    return argv if "--no-enable-chunked-prefill" in argv else [*argv, "--no-enable-chunked-prefill"]


def across_nodes(trainer: Invocation, nnodes: int, nproc: int, endpoint: str, run_id: str) -> Invocation:
    """The trainer of one node of a multi-node run: torchrun's c10d rendezvous in place of `--standalone`, which
    starts a store of its own on a free local port and ignores any rendezvous given (torch 2.13.0
    torch/distributed/run.py, the help of `--standalone`), so it can only run one node. Every node gets the same
    words: the rendezvous assigns each its rank, so no node names its own."""
    torchrun, standalone, flag, _count, *program = trainer.command
    if (standalone, flag) != ("--standalone", "--nproc_per_node"):
        raise ValueError(f"{trainer.name}: not a standalone torchrun launch: {trainer.command}")
    command = (torchrun, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, *program)
    return replace(trainer, command=command)


def _words(value: object) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [format(value, "g") if isinstance(value, float) else str(value)]


def train(version: str, venv: str, checkout: str, nproc: int, args: TrainArgs, extra_args: tuple[str, ...],
          start: str, environment: dict[str, str]) -> tuple[Invocation, list[list[str]]]:
    """The trainer under torchrun, and its arguments grouped one flag per group (the launch script puts each on
    a line). The groups leave out `--from-pretrained`, which the launch script appends last (the newest
    checkpoint, else `start`); the invocation's argv ends with it and `start`."""
    found = row(version)
    groups = [[found.flags[f.name], *_words(getattr(args, f.name))] for f in fields(args)]
    groups += [[a] for a in extra_args]
    if found.train == "script":
        command = (f"{venv}/bin/torchrun", "--standalone", "--nproc_per_node", str(nproc), f"{checkout}/scripts/train.py")
    else:
        command = (f"{venv}/bin/torchrun", "--standalone", "--nproc_per_node", str(nproc), "-m", "speculators.train")
    argv = (*(word for group in groups for word in group), found.flags["from_pretrained"], start)
    return Invocation("speculators-train", PACKAGE, version, found.train_program, command, argv, environment), groups


def scripts_ref(spec) -> str | None:
    """What the node checks its copy of the repository's scripts/ out at: the gitRef a build from git names, else
    a full commit (the stack's scriptsCommit, or the one the release's tag names upstream); None where no commit
    is known, which `scripts_problems` refuses."""
    if spec.git_ref is not None:
        return spec.git_ref
    if spec.scripts_commit is not None:
        return spec.scripts_commit
    if spec.repository in (None, REPOSITORY, REPOSITORY + ".git"):
        return release_commit(PACKAGE, spec.version)
    return None


def scripts_problems(spec, field: str) -> list[tuple[str, str]]:
    """(field, message) for a speculators whose scripts/ no commit pins."""
    if scripts_ref(spec) is not None:
        return []
    if spec.repository not in (None, REPOSITORY, REPOSITORY + ".git"):
        return [(f"{field}.scriptsCommit", f"is required with repository {spec.repository}: the full commit of its "
                 f"v{spec.version} tag (`git ls-remote {spec.repository} refs/tags/v{spec.version}^{{}}`), so that "
                 "the scripts the node runs as root are fetched by content, not by a tag that can be moved")]
    return [(f"{field}.version", f"{spec.version} has no commit in gpuhosts/compat-rules.yaml releaseCommits: add the "
             f"commit its tag names (`git ls-remote {REPOSITORY} refs/tags/v{spec.version}^{{}}`), or set "
             f"{field}.scriptsCommit")]
