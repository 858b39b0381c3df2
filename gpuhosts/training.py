"""Typed configuration of a training node stack: `gpuhosts:node` and `gpuhosts:training`.

A training node is a plain Linux machine whose NVIDIA driver comes with it (checked, never installed). It trains a
DFlash drafter with vllm-project/speculators: a vLLM server extracts the verifier's hidden states on one set of GPUs,
`torchrun` trains on another. Field rules live on the models, rules across fields in `_training_problems`, and
rules about what a release of vLLM or speculators can do in gpuhosts/compat-rules.yaml (`trainingRules`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gpuhosts.compat_data import dataset_files, dataset_overlaps, dataset_rows
from gpuhosts.dataset_size import estimate
from gpuhosts.config import DRIVER_VERSION, HOSTNAME, NAMESPACE, SHA256, MonitoringSpec, Problem, SshConfig, _Model
from gpuhosts.fields import HF_REPO, below, did_you_mean, host_address, ip_address, is_loopback, safe_directory
from gpuhosts.hostside.dataset_prepare import CONVERTERS, READABLE, split_files, split_patterns
from gpuhosts.hostside.drafter_config import compare_declared, parse_drafter_config, target_layer_ids
from gpuhosts.services import DrafterSpec, ModelSpec, PackageSpec

TRAINER_SECTIONS = ("kind", "node", "training", "multiNode", "monitoring")
TRAINER_SECRET_KEYS = ("sshPrivateKey", "hfToken")
# The Flask release of the monitor's environment: the one it is tested with (uv.lock); tests/test_monitor_deploy.py
# keeps them equal.
FLASK_VERSION = "3.1.3"
SOURCE = re.compile(r"^(?:https://[^\s'\"]+|file:///[^\s'\"]+)/$")


class NodeGpus(_Model):
    count: int = Field(ge=1, le=64, description="How many GPUs the node must have (pre-flight refuses fewer).")
    model: str = Field(min_length=1, description="A word of the GPUs' name as nvidia-smi prints it (`RTX PRO 6000`).")


class NodeConfig(_Model):
    name: str = Field(description="Node name: resource names and the plan's host folder.")
    ssh: SshConfig = Field(description="How gpuhosts reaches the node over SSH (the host key pinned).")
    gpus: NodeGpus = Field(description="The GPUs the node must have; the pre-flight checks them.")
    driver_version: str = Field(description="The NVIDIA driver the node must run (checked, not installed).")
    storage: str = Field("/data", description="Directory for models, data, environments and checkpoints. Default /data.")

    @field_validator("name")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if not HOSTNAME.match(value):
            raise ValueError("must be a lower-case host name (letters, digits, '-'), e.g. trainer")
        return value

    @field_validator("driver_version", mode="before")
    @classmethod
    def _driver(cls, value: Any) -> Any:
        if not isinstance(value, str) or not DRIVER_VERSION.match(value):
            raise ValueError(f"{value!r} is not an exact driver version; quote it, e.g. \"580.126.09\"")
        return value

    @field_validator("storage")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return safe_directory(value)


RDZV_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class RendezvousConfig(_Model):
    host: str | None = Field(None, description="Address at which every node reaches the c10d store, which the "
                                               "first node (gpuhosts:node) hosts; default its ssh.host.")
    # torch's c10d rendezvous backend listens on 29400 when the endpoint names no port
    # (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py DEFAULT_PORT).
    port: int = Field(29400, ge=1024, le=65535, description="Port of the c10d store on the first node. Default 29400, "
                                                          "torch's own.")
    id: str = Field("gpuhosts-dflash", description="torchrun --rdzv-id, the same on every node: the job's name in the "
                                                   "store. Default gpuhosts-dflash.")

    @field_validator("host")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return value if value is None else host_address(value)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not RDZV_ID.match(value):
            raise ValueError(f"{value!r} is not a rendezvous id (letters, digits, '_', '.', '-')")
        return value


class MultiNodeConfig(_Model):
    nodes: tuple[NodeConfig, ...] = Field(min_length=1, description="The nodes beside gpuhosts:node, each typed as "
                                          "it is; each runs a hidden-state server of its own on training.server.gpus "
                                          "and torchrun's workers on training.trainingGpus. Planned and checked: "
                                          "`pulumi up` converges gpuhosts:node alone.")
    rendezvous: RendezvousConfig = Field(RendezvousConfig(), description="torchrun's c10d rendezvous.")


class ServerSpec(_Model):
    gpus: tuple[int, ...] = Field((0, 1, 2, 3), description="GPU indexes of the hidden-state server. Default 0-3.")
    tensor_parallel_size: int = Field(4, ge=1, le=64, description="vLLM --tensor-parallel-size. Default 4.")
    data_parallel_size: int = Field(1, ge=1, le=64, description="vLLM --data-parallel-size. Default 1.")
    port: int = Field(8000, ge=1024, le=65535, description="Port on 127.0.0.1. Default 8000.")
    mem_fraction: float = Field(0.85, gt=0, lt=1, description="vLLM --gpu-memory-utilization. Default 0.85.")
    max_model_len: int = Field(8192, ge=512, description="vLLM --max-model-len; at least the training sequence. Default 8192.")
    extra_args: tuple[str, ...] = Field((), description="More vLLM flags, appended.")


class LayerType(str, Enum):
    SLIDING = "sliding_attention"
    FULL = "full_attention"


class HyperParameters(_Model):
    epochs: int = Field(3, ge=1, le=1000, description="Training epochs. Default 3.")
    lr: float = Field(3e-4, gt=0, lt=1, description="Learning rate. Default 3e-4.")
    block_size: int = Field(16, ge=2, le=64, description="DFlash block size. Default 16.")
    # Rendered on every release, so that a bump of speculators changes neither silently: 0.9 moved their defaults
    # for DFlash (loss_fn kl_div → ce, max_anchors 3072 → 512; gpuhosts/compat-rules.yaml trainDefaults).
    loss_fn: str = Field("kl_div", pattern=r"^[a-z_]+$|^\{.*\}$",
                         description="speculators --loss-fn: a loss name (`kl_div`, `ce`, `tv`) or a JSON map of "
                                     "weights. Default kl_div, what speculators 0.7 trains DFlash with.")
    max_anchors: int = Field(3072, ge=1, description="speculators --max-anchors: anchor positions per sequence. "
                                                     "Default 3072, speculators 0.7's.")
    per_position_loss_weight: Literal["fixed-exp-decay", "dpace"] = Field(
        "fixed-exp-decay", description="speculators --per-position-loss-weight: how a block's positions weigh in the "
                                       "loss; `dpace` needs lossFn ce. Default fixed-exp-decay, speculators 0.7's.")

    @model_validator(mode="after")
    def _dpace_needs_ce(self) -> "HyperParameters":
        # speculators' own rule (train/config/schema.py TrainConfig._validate_dpace), before any host is touched
        if self.per_position_loss_weight == "dpace" and self.loss_fn != "ce":
            raise ValueError(f"perPositionLossWeight dpace needs lossFn ce (have {self.loss_fn}); set lossFn: ce, "
                             "or perPositionLossWeight: fixed-exp-decay")
        return self
    num_layers: int = Field(5, ge=1, le=16, description="Drafter decoder layers. Default 5.")
    layer_types: tuple[LayerType, ...] | None = Field(
        None, description="The drafter's per-layer attention (its config.json `layer_types`), checked on the node "
                          "after the download and kept by the conversion; default read from config.json.")
    sliding_window: int | None = Field(None, ge=1, description="The drafter's sliding window (config.json "
                                                               "`sliding_window`); default read from config.json.")
    mask_token_id: int | None = Field(None, ge=0, description="The mask token of DFlash blocks (config.json "
                                                              "`dflash_config.mask_token_id`); default read from "
                                                              "config.json, never pasted.")
    max_seq_len: int = Field(8192, ge=256, description="Tokens per training sequence (train.py --total-seq-len; "
                                                       "the prepared data set's --seq-length); the server's "
                                                       "maxModelLen must cover it. Default 8192.")
    extra_args: tuple[str, ...] = Field((), description="More train.py flags, appended.")


# A dataset source is pinned by a full commit: a branch or tag moves, and the same config would then mix other rows.
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The stand-in for a commit not yet looked up: refused, since `hf download --revision 000…` finds no such commit and
# the node would stop after the downloads of every source before it.
PLACEHOLDER_COMMIT = "0" * 40
# How the seed's tool-calling share is counted: the sources converted as function-calling data.
TOOL_CONVERTERS = ("glaive-function-calling", "tool-calls")


class DatasetSource(_Model):
    repo: str = Field(description="Hugging Face dataset repository, e.g. Open-Orca/OpenOrca.")
    revision: str = Field(description="Full 40-hex commit of the dataset repository (its History on the Hub); "
                                      f"the placeholder {PLACEHOLDER_COMMIT[:8]}… (40 zeros) is refused.")
    split: str = Field("train", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Split to take rows from, its files "
                                                                            "chosen by the Hub's rule (files named "
                                                                            "after no split are train). Default train.")
    subset: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                               description="Configuration (subset) of the dataset, where it has several.")
    data_files: tuple[str, ...] = Field((), description="Files of the repository to read instead of the split's "
                                                       "(relative paths, shell patterns allowed).")
    count: int = Field(description="Distinct samples taken from this source (after a shuffle seeded by dataset.seed; "
                                   "a row repeating a sample an earlier source or row gave is skipped).")
    converter: str = Field(description="How a row of this source becomes a conversation: "
                                       + ", ".join(CONVERTERS) + ".")
    gated: bool = Field(False, description="The dataset is gated: downloaded with gpuhosts:hfToken. Default false.")

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not HF_REPO.match(value):
            raise ValueError(f"{value!r} is not a Hugging Face repository; use owner/name, e.g. Open-Orca/OpenOrca")
        return value

    @field_validator("revision", mode="before")
    @classmethod
    def _revision(cls, value: Any) -> Any:
        if not isinstance(value, str) or not COMMIT.match(value):
            raise ValueError(f"{value!r} is not a full commit; pin the 40-hex commit from the dataset's History on "
                             "the Hub (a branch or tag moves and the mix would change under the same config)")
        if value == PLACEHOLDER_COMMIT:
            raise ValueError("is the placeholder commit (40 zeros), which no repository has; pin the 40-hex commit "
                             "from the dataset's History on the Hub")
        return value

    @field_validator("data_files")
    @classmethod
    def _files(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path or path.startswith("/") or ".." in path.split("/") or not re.match(r"^[A-Za-z0-9_.*?/=-]+$", path):
                raise ValueError(f"{path!r} is not a relative path inside the repository (letters, digits, _ . - / "
                                 "= and the patterns * ?)")
        return value

    @field_validator("count", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{value!r} is not a positive number of rows; give how many rows to take, at least 1")
        return value

    @field_validator("converter")
    @classmethod
    def _converter(cls, value: str) -> str:
        if value not in CONVERTERS:
            raise ValueError(f"{value!r} is not a converter; known: {', '.join(CONVERTERS)}")
        return value

    @property
    def name(self) -> str:
        return f"{self.repo}@{self.revision}:{self.split}"

    @property
    def identity(self) -> tuple:
        return (self.repo, self.revision, self.subset, self.split, tuple(sorted(self.data_files)))


class LongSamples(str, Enum):
    CUT = "cut"


# Default bound of the mix's share of samples longer than hyper.maxSeqLen: past it the plan stops, since that much
# of the data would train only on its first maxSeqLen tokens.
MAX_CUT_SHARE = 0.05


class DatasetSpec(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,39}$", description="Directory name under <storage>/data "
                                                                      "(at most 40 characters).")
    source: str | None = Field(None, description="URL of a directory holding a pre-made tokenized data set and its "
                                                 "SHA256SUMS manifest (https://…/ or file:///…/, with the trailing "
                                                 "slash). Either source or mix.")
    manifest_sha256: str | None = Field(None, description="sha256 of that SHA256SUMS file: it pins every file it "
                                                          "lists. Required with source.")
    mix: tuple[DatasetSource, ...] | None = Field(None, description="Sources the node downloads, converts, mixes and "
                                                                    "tokenizes itself. Either mix or source.")
    seed: int | None = Field(None, ge=0, description="Seed of the mix's shuffles: the same sources and seed give the "
                                                     "same data set. Required with mix.")
    samples: int = Field(ge=1, description="Samples in the data set (for the plan and the monitor's ETA); with mix, "
                                           "the sum of its counts.")
    size_gb: float | None = Field(None, gt=0, description="Size on disk of a pre-made set, for the pre-flight "
                                                      "disk check (`du -s --block-size=1G` of it); required with "
                                                      "source. With mix it is derived (the plan's dataset.sizeGb) "
                                                      "and refused here.")
    long_samples: LongSamples = Field(LongSamples.CUT, description="What becomes of a sample longer than "
                                                                   "hyper.maxSeqLen: cut (prepare_data.py keeps "
                                                                   "its first maxSeqLen tokens; the rest is never "
                                                                   "trained on). A longer hyper.maxSeqLen (and "
                                                                   "server.maxModelLen) keeps more of them. "
                                                                   "Default cut.")
    max_cut_share: float = Field(MAX_CUT_SHARE, ge=0, le=1,
                                 description="Largest share of the mix's samples that may be longer than "
                                             "hyper.maxSeqLen, as the plan estimates it (0.05 = 5 %); above it "
                                             f"the plan stops. Default {MAX_CUT_SHARE}.")
    delete_on_destroy: bool = Field(False, description="Delete the staged data on destroy. Default false: kept.")

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | None) -> str | None:
        if value is not None and not SOURCE.match(value):
            raise ValueError(f"{value!r} must be an https:// or file:/// URL of a directory, ending in /")
        return value

    @field_validator("manifest_sha256")
    @classmethod
    def _sha(cls, value: str | None) -> str | None:
        if value is not None and not SHA256.match(value):
            raise ValueError("must be 64 lower-case hex digits (sha256sum SHA256SUMS)")
        return value

    @field_validator("mix")
    @classmethod
    def _mix(cls, value: tuple[DatasetSource, ...] | None) -> tuple[DatasetSource, ...] | None:
        if value is not None and not value:
            raise ValueError("lists no source; declare at least one, or use source for a pre-made data set")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> "DatasetSpec":
        if self.source is not None and self.mix is not None:
            raise ValueError("training.dataset.source and training.dataset.mix are both set; declare either a "
                             "pre-made data set (source, manifestSha256) or a mix the node prepares (mix, seed)")
        if self.source is None and self.mix is None:
            raise ValueError("declares neither training.dataset.source nor training.dataset.mix; give one")
        if self.source is not None and self.manifest_sha256 is None:
            raise ValueError("training.dataset.manifestSha256 is required with source: `sha256sum SHA256SUMS`")
        if self.mix is not None and self.size_gb is not None:
            raise ValueError("training.dataset.sizeGb is derived for a mix (the plan's dataset.sizeGb, from the "
                             "measured bytes per token of speculators' prepare_data.py); remove sizeGb")
        if self.source is not None and self.size_gb is None:
            raise ValueError("training.dataset.sizeGb is required with source: the pre-made set's size on disk "
                             "(`du -s --block-size=1G` of it), for the pre-flight disk check")
        if self.mix is not None and self.seed is None:
            raise ValueError("training.dataset.seed is required with mix: give an integer, e.g. seed: 0, so that "
                             "the mix can be made again")
        return self

    @property
    def tool_calling_samples(self) -> int:
        return sum(s.count for s in self.mix or () if s.converter in TOOL_CONVERTERS)


def mix_problems(dataset: DatasetSpec) -> list[Problem]:
    """Rules across the sources of a mix: each once, no more rows than a source has, a split with files (where the
    repository's listing is known), counts the known overlaps leave room for, samples = the counts' sum."""
    problems: list[Problem] = []
    if dataset.mix is None:
        return problems
    seen: dict[tuple, int] = {}
    for index, source in enumerate(dataset.mix):
        field = f"{NAMESPACE}:training.dataset.mix[{index}]"
        if source.identity in seen:
            problems.append(Problem(path=f"{field}.repo", message=(
                f"{source.name} is already mix[{seen[source.identity]}] (same repo, revision, subset, split and "
                "files); give each source once and add up their counts")))
            continue
        seen[source.identity] = index
        known = dataset_rows(source.repo, source.split, source.subset)
        if known is not None and source.count > known.rows:
            problems.append(Problem(path=f"{field}.count", message=(
                f"{source.count} rows asked, but {source.repo} split {source.split} has {known.rows} "
                f"({known.source}); lower the count")))
        problems += _file_problems(field, source)
    problems += _overlap_problems(dataset)
    total = sum(s.count for s in dataset.mix)
    if total != dataset.samples:
        problems.append(Problem(path=f"{NAMESPACE}:training.dataset.samples", message=(
            f"{dataset.samples}, but the mix's counts add up to {total}; make samples the sum of the counts")))
    return problems


def _file_problems(field: str, source: DatasetSource) -> list[Problem]:
    """The source's split resolved from its repository's known listing, as the node resolves it after the download:
    no file, or none the converter reads, stops the plan before any download."""
    listing = dataset_files(source.repo, source.revision)
    if listing is None:
        return []
    found = split_files(listing.files, source.split, source.subset, source.data_files)
    if not found:
        if source.data_files:
            return [Problem(path=f"{field}.dataFiles", message=(
                f"{' '.join(source.data_files)} matches no file of {source.repo}@{source.revision[:7]} (files: "
                f"{', '.join(listing.files)}); name files it has"))]
        paths = [p[len(source.subset) + 1:] for p in listing.files if p.startswith(f"{source.subset}/")] \
            if source.subset else list(listing.files)
        splits = split_patterns(paths)
        return [Problem(path=f"{field}.split", message=(
            f"{source.repo}@{source.revision[:7]} has no file of split {source.split!r} by the Hub's rule (its "
            f"splits: {', '.join(splits) or 'none'}; files: {', '.join(listing.files)}); give one of its splits, "
            "or name the files in dataFiles"))]
    unreadable = [p for p in found if not p.lower().endswith(READABLE)]
    if unreadable:
        return [Problem(path=f"{field}.dataFiles" if source.data_files else f"{field}.split", message=(
            f"{source.repo} split {source.split!r} is {', '.join(unreadable)}, which the converter cannot read (it "
            "reads .jsonl, .json and .parquet); name readable files in dataFiles"))]
    return []


def source_files(source: DatasetSource) -> list[str] | None:
    """The files the node will convert for a source, where its repository's listing is known (None: unknown)."""
    listing = dataset_files(source.repo, source.revision)
    return None if listing is None else split_files(listing.files, source.split, source.subset, source.data_files)


@dataclass(frozen=True)
class Overlap:
    """Two sources of a mix that share samples: the later one (in the mix's order) loses its copies."""

    first: int
    later: int
    of: int           # the source whose rows `share` is a part of
    share: float
    duplicates: int   # about how many of the later source's rows repeat what the first one takes
    distinct: int     # about how many distinct samples the later source has beyond those
    source: str


def mix_overlaps(dataset: DatasetSpec) -> list[Overlap]:
    """The known overlaps of the mix's sources (gpuhosts/compat-rules.yaml `datasetOverlaps`), estimated from the
    sources' known sizes (a pair with a size unknown is left out): the first source takes count/rows of the samples
    the two have in common, and the later one's copies of those are dropped."""
    found = []
    mix = dataset.mix or ()
    for row in dataset_overlaps():
        at = {s.repo: i for i, s in reversed(list(enumerate(mix)))}
        if not all(repo in at for repo in row.repos):
            continue
        a, b = (at[repo] for repo in row.repos)
        rows = {i: dataset_rows(mix[i].repo, mix[i].split, mix[i].subset) for i in (a, b)}
        if any(r is None for r in rows.values()):
            continue
        first, later = min(a, b), max(a, b)
        shared = row.share * rows[b].rows  # the samples the two repositories have in common
        duplicates = round(shared * min(1.0, mix[first].count / rows[first].rows))
        found.append(Overlap(first, later, b, row.share, duplicates, rows[later].rows - duplicates,
                             " ".join(row.source.split())))
    return found


def _overlap_problems(dataset: DatasetSpec) -> list[Problem]:
    problems = []
    for overlap in mix_overlaps(dataset):
        later = dataset.mix[overlap.later]
        if later.count > overlap.distinct:
            first = dataset.mix[overlap.first]
            problems.append(Problem(path=f"{NAMESPACE}:training.dataset.mix[{overlap.later}].count", message=(
                f"{later.count:,} distinct samples asked of {later.repo}, but about {overlap.duplicates:,} of its rows "
                f"are samples mix[{overlap.first}] ({first.repo}, {first.count:,}) takes first and the mixer drops "
                f"them, leaving about {overlap.distinct:,}; lower the count to at most {overlap.distinct} and give "
                f"the rest to another source ({overlap.source})")))
    return problems


def mix_warnings(dataset: DatasetSpec) -> list[str]:
    warnings: list[str] = []
    for overlap in mix_overlaps(dataset):
        first, later = dataset.mix[overlap.first], dataset.mix[overlap.later]
        warnings.append(
            f"{NAMESPACE}:training.dataset.mix[{overlap.first}] {first.repo} and mix[{overlap.later}] {later.repo} "
            f"share samples (about {overlap.share:.0%} of {dataset.mix[overlap.of].repo}'s rows): the mixer keeps "
            f"each once, from mix[{overlap.first}]; about {overlap.duplicates:,} rows of mix[{overlap.later}] repeat "
            f"what mix[{overlap.first}] takes, so its {later.count:,} come from about {overlap.distinct:,} distinct "
            "samples")
    for index, source in enumerate(dataset.mix or ()):
        field = f"{NAMESPACE}:training.dataset.mix[{index}]"
        if dataset_rows(source.repo, source.split, source.subset) is None:
            warnings.append(f"{field}.repo {source.repo} split {source.split} is not in the known dataset sizes "
                            "(gpuhosts/compat-rules.yaml `datasets`): its count is checked only on the node")
    return warnings


def length_problems(training: "TrainingConfig") -> list[Problem]:
    """More of the mix longer than hyper.maxSeqLen than dataset.maxCutShare allows, by the plan's estimate."""
    found = estimate(training)
    dataset = training.dataset
    if dataset.mix is not None and found is None:
        return [Problem(path=f"{NAMESPACE}:training.dataset.mix", message=(
            "its size on disk cannot be derived: no measurement of speculators' prepare_data.py is committed "
            "(gpuhosts/measured/); run `make verify-prepare-data` and commit what it writes"))]
    if found is None or found.over <= dataset.max_cut_share:
        return []
    worst = sorted((s for s in found.sources if s.over > 0), key=lambda s: -s.count * s.over)
    named = "; ".join(f"mix[{s.index}] {s.repo} {s.over:.0%} of {s.count:,}" for s in worst[:3])
    return [Problem(path=f"{NAMESPACE}:training.hyper.maxSeqLen", message=(
        f"about {found.over:.1%} of the mix's {found.samples:,} samples are longer than {found.max_seq_len} tokens "
        f"({named}) and would be cut to their first {found.max_seq_len}, more than dataset.maxCutShare "
        f"{dataset.max_cut_share:.1%}; raise hyper.maxSeqLen (and server.maxModelLen), lower those sources' "
        "counts, or raise dataset.maxCutShare"))]


def length_warnings(training: "TrainingConfig") -> list[str]:
    """Each source with samples longer than hyper.maxSeqLen, and a mix whose size could not be derived."""
    dataset = training.dataset
    if dataset.mix is None:
        return []
    found = estimate(training)
    if found is None:
        return []
    warnings = []
    if found.version != training.speculators.version:
        warnings.append(f"{NAMESPACE}:training.speculators.version {training.speculators.version}: the data set's "
                        f"size is estimated from speculators {found.version}'s prepare_data.py; run "
                        "`make verify-prepare-data` for this release")
    for source in found.sources:
        if source.over >= 0.01:
            warnings.append(
                f"{NAMESPACE}:training.dataset.mix[{source.index}] {source.repo}: about {source.over:.0%} of its "
                f"{source.count:,} samples are longer than hyper.maxSeqLen {found.max_seq_len} and are cut to their "
                f"first {found.max_seq_len} tokens (dataset.longSamples: {found.policy}); lengths {source.basis}")
    return warnings


class SmokeSpec(_Model):
    samples: int = Field(100, ge=1, le=100_000, description="Samples of the smoke run, drawn from the prepared mix "
                                                            "with its seed (prepare_data.py --max-samples). "
                                                            "Default 100.")
    epochs: int = Field(1, ge=1, le=10, description="Epochs of the smoke run. Default 1.")


class MonitorSpec(_Model):
    bind: str = Field("127.0.0.1", description="Address of the monitor. Default 127.0.0.1 (reach it through an SSH tunnel).")
    port: int = Field(8686, ge=1024, le=65535, description="Port of the monitor. Default 8686.")
    token_secret: str | None = Field(None, description="Secret stack key with the monitor's token; required for any "
                                                       "bind other than 127.0.0.1.")

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        return ip_address(value)


# A node keeps its weights under its own storage, not in a container: the same fields, its own default directory.
NODE_MODEL_DIR = "Where the weights live on the node. Default <storage>/models/<repo>."


class NodeModelSpec(ModelSpec):
    local_dir: str | None = Field(None, description=NODE_MODEL_DIR)


class NodeDrafterSpec(DrafterSpec):
    local_dir: str | None = Field(None, description=NODE_MODEL_DIR)


class TrainingConfig(_Model):
    verifier: NodeModelSpec = Field(description="The target model whose hidden states train the drafter.")
    drafter: NodeDrafterSpec = Field(description="The drafter to start from (its weights), e.g. "
                                                 "z-lab/Qwen3.6-27B-DFlash.")
    speculators: PackageSpec = Field(description="vllm-project/speculators release (its own environment).")
    vllm: PackageSpec = Field(description="vLLM release of the hidden-state server (its own environment).")
    server: ServerSpec = Field(ServerSpec(), description="The hidden-state server.")
    training_gpus: tuple[int, ...] = Field((4, 5, 6, 7), description="GPU indexes of torchrun. Default 4-7.")
    hyper: HyperParameters = Field(description="Training hyper-parameters of train.py.")
    dataset: DatasetSpec = Field(description="The training data: a pre-made tokenized set pinned by its manifest, "
                                             "or a mix of Hugging Face datasets the node prepares.")
    checkpoints: str | None = Field(None, description="Checkpoint directory. Default <storage>/checkpoints/<drafter name>.")
    checkpoints_reserve_gb: float = Field(200, gt=0, description="Disk kept free for checkpoints. Default 200.")
    delete_checkpoints_on_destroy: bool = Field(False, description="Delete checkpoints on destroy. Default false: kept.")
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$", description="Python of the environments. Default 3.12.")
    monitor: MonitorSpec = Field(MonitorSpec(), description="The monitoring web UI.")
    smoke: SmokeSpec | None = Field(None, description="A short training before the full one, e.g. {samples: 100, "
                                                      "epochs: 1}: the whole path (server, check, data, trainer, "
                                                      "checkpoint) shown working in minutes. Its checkpoints go to "
                                                      "<checkpoints>-smoke, so the full run never resumes from "
                                                      "them; it runs once per value. Needs dataset.mix. Default "
                                                      "none.")

    @field_validator("checkpoints")
    @classmethod
    def _checkpoints(cls, value: str | None) -> str | None:
        return None if value is None else safe_directory(value)

    @field_validator("training_gpus")
    @classmethod
    def _gpus(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("lists no GPU")
        return value

    @model_validator(mode="after")
    def _layers(self) -> "TrainingConfig":
        types = self.hyper.layer_types
        if types is not None and len(types) != self.hyper.num_layers:
            raise ValueError(f"hyper.layerTypes lists {len(types)} layer(s), hyper.numLayers is "
                             f"{self.hyper.num_layers}; give one type per drafter layer")
        if self.drafter.num_layers is not None and self.drafter.num_layers != self.hyper.num_layers:
            raise ValueError(f"drafter.numLayers {self.drafter.num_layers} differs from hyper.numLayers "
                             f"{self.hyper.num_layers}; the drafter is trained with the layers it has")
        return self


@dataclass(frozen=True)
class TrainerStack:
    node: NodeConfig
    training: TrainingConfig
    warnings: tuple[str, ...] = ()
    # Further nodes of a multi-node run, planned and checked only (gpuhosts/plans/multi_node.py).
    multi_node: MultiNodeConfig | None = None
    # Exporters and the files a Prometheus reads (`gpuhosts:monitoring`); None: none are installed.
    monitoring: MonitoringSpec | None = None

    @property
    def storage(self) -> str:
        return self.node.storage

    def model_dir(self, spec: ModelSpec) -> str:
        return spec.local_dir or f"{self.storage}/models/{spec.repo}"

    @property
    def checkpoints(self) -> str:
        return self.training.checkpoints or f"{self.storage}/checkpoints/{self.training.drafter.repo.split('/')[1]}"

    @property
    def dataset_dir(self) -> str:
        return f"{self.storage}/data/{self.training.dataset.name}"

    @property
    def smoke_checkpoints(self) -> str | None:
        """A directory beside the checkpoints, not in them: the full run resumes from what lies in its own."""
        return f"{self.checkpoints}-smoke" if self.training.smoke else None


def _training_problems(node: NodeConfig, training: TrainingConfig, secret_keys: set[str]) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: str, message: str) -> None:
        problems.append(Problem(path=f"{NAMESPACE}:{path}", message=message))

    server, train = training.server.gpus, training.training_gpus
    for field, gpus in (("training.server.gpus", server), ("training.trainingGpus", train)):
        beyond = [g for g in gpus if g >= node.gpus.count or g < 0]
        if beyond:
            add(field, f"GPU(s) {beyond} do not exist on a node of {node.gpus.count} GPUs: use GPUs 0-"
                f"{node.gpus.count - 1}")
        if len(set(gpus)) != len(gpus):
            add(field, "lists a GPU twice; list each GPU once")
    shared = sorted(set(server) & set(train))
    if shared:
        add("training.trainingGpus", f"GPU(s) {shared} are also the server's; give training GPUs of its own, apart "
            "from server.gpus")
    parallel = training.server.tensor_parallel_size * training.server.data_parallel_size
    if parallel != len(server):
        add("training.server.tensorParallelSize", f"tensor × data parallel = {parallel}, but the server has "
            f"{len(server)} GPU(s); make them equal")
    if training.drafter.gated and "hfToken" not in secret_keys:
        add("training.drafter.gated", f"{training.drafter.repo} is gated and {NAMESPACE}:hfToken is not set; "
            f"`pulumi config set --secret {NAMESPACE}:hfToken`")
    monitor = training.monitor
    if not is_loopback(monitor.bind) and monitor.token_secret is None:
        add("training.monitor.tokenSecret", f"is required when the monitor binds {monitor.bind}: anyone who reaches the "
            "port would see the training; set a secret key name, or keep bind 127.0.0.1 and use an SSH tunnel")
    if monitor.token_secret is not None and monitor.token_secret not in secret_keys:
        likely = did_you_mean(monitor.token_secret, secret_keys)
        add("training.monitor.tokenSecret", f"{NAMESPACE}:{monitor.token_secret} is not a secret of this stack"
            + (f", and {NAMESPACE}:{likely} is: write {likely} here, or set {monitor.token_secret} with " if likely
               else "; ") + f"`pulumi config set --secret {NAMESPACE}:{monitor.token_secret}`")
    if monitor.port == training.server.port:
        add("training.monitor.port", f"{monitor.port} is the hidden-state server's port too; give each its own port")
    problems += _path_problems(node, training)
    gated = [i for i, s in enumerate(training.dataset.mix or ()) if s.gated]
    if gated and "hfToken" not in secret_keys:
        add(f"training.dataset.mix[{gated[0]}].gated", f"{training.dataset.mix[gated[0]].repo} is gated and "
            f"{NAMESPACE}:hfToken is not set; `pulumi config set --secret {NAMESPACE}:hfToken`")
    problems += mix_problems(training.dataset)
    smoke = training.smoke
    if smoke is not None and training.dataset.mix is None:
        add("training.smoke", "needs training.dataset.mix: the smoke run's samples are drawn from the mix the node "
            "prepares (prepare_data.py --max-samples); a pre-made source has no mix to draw from. Remove smoke, or "
            "declare the data set as a mix")
    elif smoke is not None and smoke.samples > training.dataset.samples:
        add("training.smoke.samples", f"{smoke.samples} is more than the data set's {training.dataset.samples} "
            "samples; a smoke run takes a few of them, e.g. 100")
    problems += length_problems(training)
    if training.server.max_model_len < training.hyper.max_seq_len:
        add("training.server.maxModelLen", f"{training.server.max_model_len} is shorter than hyper.maxSeqLen "
            f"{training.hyper.max_seq_len}; the server could not extract a whole sample: raise it to "
            f"{training.hyper.max_seq_len} or more")
    return problems


def _path_problems(node: NodeConfig, training: TrainingConfig) -> list[Problem]:
    """What destroy may delete lies where gpuhosts put it, and never holds what it keeps."""
    problems: list[Problem] = []
    storage = node.storage
    models = {"training.verifier.localDir": training.verifier.local_dir or f"{storage}/models/{training.verifier.repo}",
              "training.drafter.localDir": training.drafter.local_dir or f"{storage}/models/{training.drafter.repo}"}
    dataset = f"{storage}/data/{training.dataset.name}"
    checkpoints = training.checkpoints
    if checkpoints is not None:
        kept = {**models, "training.dataset": dataset, "node.storage": storage}
        for field, path in kept.items():
            if below(path, checkpoints):
                problems.append(Problem(path=f"{NAMESPACE}:training.checkpoints", message=(
                    f"{checkpoints} holds {path} ({field}); destroy with deleteCheckpointsOnDestroy would delete it; "
                    f"give checkpoints a directory of their own, e.g. {storage}/checkpoints/<name>")))
                break
        else:
            if not below(checkpoints, storage):
                # Two values disagree: either may be the one to change, so both are named.
                problems.append(Problem(path=f"{NAMESPACE}:training.checkpoints", message=(
                    f"{checkpoints} is outside node.storage ({storage}); keep checkpoints under it, where gpuhosts "
                    "owns what it deletes")))
                problems.append(Problem(path=f"{NAMESPACE}:node.storage", message=(
                    f"{storage} does not hold training.checkpoints ({checkpoints}); give the directory that holds "
                    "models, data and checkpoints")))
    for field, spec in (("training.verifier", training.verifier), ("training.drafter", training.drafter)):
        path = models[f"{field}.localDir"]
        if spec.delete_on_destroy and (path.count("/") < 2 or below(storage, path)):
            problems.append(Problem(path=f"{NAMESPACE}:{field}.deleteOnDestroy", message=(
                f"would delete {path}, which holds more than this model; give the model a directory of its own")))
    return problems


def referenced_training_secrets(raw_training: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(raw_training, dict):
        if isinstance(raw_training.get("drafter"), dict) and raw_training["drafter"].get("gated") is True:
            names.add("hfToken")
        dataset = raw_training.get("dataset")
        mix = dataset.get("mix") if isinstance(dataset, dict) else None
        if isinstance(mix, list) and any(isinstance(s, dict) and s.get("gated") is True for s in mix):
            names.add("hfToken")
        monitor = raw_training.get("monitor")
        if isinstance(monitor, dict) and isinstance(monitor.get("tokenSecret"), str):
            names.add(monitor["tokenSecret"])
    return names


def declared_drafter(training: TrainingConfig, ids: "LayerIds | None" = None) -> dict[str, Any]:
    """What the stack says of the drafter's config.json (None: take it from the file), as the node's check reads it."""
    hyper = training.hyper
    declared: dict[str, Any] = {
        "maskTokenId": hyper.mask_token_id,
        "layerTypes": [t.value for t in hyper.layer_types] if hyper.layer_types is not None else None,
        "slidingWindow": hyper.sliding_window, "numLayers": hyper.num_layers, "blockSize": hyper.block_size}
    if ids is not None:
        declared["targetLayerIds"] = list(ids.drafter)
    return declared


def drafter_config_problems(training: TrainingConfig, config: dict[str, Any]) -> list[Problem]:
    """The stack's drafter values against the drafter's config.json, where the plan has it (the node checks the
    downloaded file the same way: gpuhosts/hostside/drafter_config.py runs there verbatim)."""
    _, found = compare_declared(parse_drafter_config(config), declared_drafter(training),
                                origin=f"{training.drafter.repo}'s config.json")
    return [Problem(path=f"{NAMESPACE}:training.{name}", message=message) for name, message in found]


# --- layer ids: derived, never pasted ------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerIds:
    """The three spellings of one choice of verifier layers.

    `drafter`: the drafter config's `dflash_config.target_layer_ids` (z-lab convention: decoder layer indexes).
    `trainer`: what train.py's --target-layer-ids gets (speculators/vLLM convention: hidden-state indexes, +1).
    `server`: what the hidden-state server extracts — the trainer's ids plus the last layer, which launch_vllm.py
    appends itself (--include-last-layer), so it is given `trainer` and must not be given the last layer.
    """

    drafter: tuple[int, ...]
    trainer: tuple[int, ...]
    server: tuple[int, ...]


def layer_ids(num_verifier_layers: int, num_ids: int, declared: tuple[int, ...] | None = None) -> LayerIds:
    """`num_ids` ids derived as z-lab does (by default one per drafter layer), or the drafter's declared list."""
    drafter = tuple(declared) if declared else tuple(target_layer_ids(num_verifier_layers, num_ids))
    trainer = tuple(i + 1 for i in drafter)
    return LayerIds(drafter=drafter, trainer=trainer, server=trainer + (num_verifier_layers,))
