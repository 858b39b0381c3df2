"""The compatibility data (gpuhosts/compat-rules.yaml) as typed rows: known models, engine releases by version
range, and the rule rows that gpuhosts.compat checks. Pure data access; nothing here renders or checks a stack."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from gpuhosts.data_files import DATA_LOADER

RULES_FILE = Path(__file__).resolve().parent / "compat-rules.yaml"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


class _Row(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Rule(_Row):
    """A row of `rules` (checks over services); `TrainingRule` rows check a training node's settings."""

    id: str
    severity: Severity
    check: str
    params: dict[str, Any] = {}
    field: str
    reason: str
    fix: str
    source: str


class ModelRow(_Row):
    repo: str
    size_gb: float | None = None
    family: str | None = None
    gdn_hybrid: bool | None = None
    num_layers: int | None = None
    sliding_window: bool | None = None
    # config.json's max_position_embeddings: the longest context the model takes without rope scaling.
    max_position_embeddings: int | None = None
    source: str | None = None


class DatasetRow(_Row):
    """A row of `datasets`: how many rows a split of a Hugging Face dataset has, and where that figure is read."""

    repo: str
    split: str = "train"
    subset: str | None = None
    rows: int
    source: str


class DatasetFilesRow(_Row):
    """A row of `datasetFiles`: the files of a dataset repository at one commit (the paths of the Hub's tree
    listing), so that the plan resolves a source's split as the node will."""

    repo: str
    revision: str
    files: tuple[str, ...]
    source: str


class DatasetOverlapRow(_Row):
    """A row of `datasetOverlaps`: about `share` of the rows of `repos[1]` are samples of `repos[0]` too."""

    repos: tuple[str, str]
    share: float
    source: str


class LengthRange(_Row):
    from_: int = Field(alias="from", ge=0)
    up_to: int
    share: float = Field(ge=0, le=1)


class DatasetLengthsRow(_Row):
    """A row of `datasetLengths`: the token lengths of a dataset's rows as the dataset publishes them."""

    repo: str
    tokenizer: str
    ranges: tuple[LengthRange, ...]
    source: str


class TrainingRule(Rule):
    """A row of `trainingRules`: a check over a training node's settings."""


class EngineRow(_Row):
    """Facts of the releases of one package in a version range; see the `engines` section of compat-rules.yaml."""

    package: str
    versions: str
    lock_constraints: tuple[str, ...] = ()
    flag_renames: dict[str, str] = {}
    redundant_environment: tuple[str, ...] = ()
    reasoning_field: str | None = None
    contains_prs: tuple[int, ...] = ()
    convert: str | None = None
    train: str | None = None
    prepare: str | None = None
    train_defaults: dict[str, Any] = {}
    removed_train_flags: tuple[str, ...] = ()
    reason: str | None = None
    source: str

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"{value!r} is not a PEP 440 version range such as \">=0.5.23\"") from None
        return value

    def holds(self, version: str) -> bool:
        return SpecifierSet(self.versions).contains(Version(version), prereleases=True)


@dataclass(frozen=True)
class EngineFacts:
    """What the matching `engines` rows say about one release (later rows win per field)."""

    package: str
    version: str
    lock_constraints: tuple[str, ...] = ()
    flag_renames: tuple[tuple[str, str], ...] = ()
    redundant_environment: frozenset[str] = frozenset()
    reasoning_field: str | None = None
    contains_prs: frozenset[int] = frozenset()
    convert: str | None = None
    train: str | None = None
    prepare: str | None = None
    # The trainer's own defaults for a DFlash run, by TrainConfig field, where they matter to a bump.
    train_defaults: tuple[tuple[str, Any], ...] = ()
    removed_train_flags: frozenset[str] = frozenset()
    sources: tuple[str, ...] = ()

    def flag(self, name: str) -> str:
        return dict(self.flag_renames).get(name, name)


class HostRow(_Row):
    """A Proxmox VE release a host may run: its Debian base and the kernel series it boots by default."""

    release: str
    debian: str
    kernel_series: str
    pve_container: str
    source: str


class DriverKernelRow(_Row):
    """NVIDIA driver branches whose kernel modules do not build from a kernel series on."""

    branches: tuple[int, ...]
    from_kernel: str
    reason: str
    source: str


class RuleFile(_Row):
    models: tuple[ModelRow, ...] = ()
    hosts: tuple[HostRow, ...] = ()
    driver_kernels: tuple[DriverKernelRow, ...] = ()
    engines: tuple[EngineRow, ...] = ()
    newest: dict[str, str] = {}
    rules: tuple[Rule, ...]
    training_rules: tuple[TrainingRule, ...] = ()
    datasets: tuple[DatasetRow, ...] = ()
    dataset_files: tuple[DatasetFilesRow, ...] = ()
    dataset_overlaps: tuple[DatasetOverlapRow, ...] = ()
    dataset_lengths: tuple[DatasetLengthsRow, ...] = ()
    release_commits: dict[str, dict[str, str]] = {}


@dataclass(frozen=True)
class ModelFacts:
    family: str | None = None
    gdn_hybrid: bool = False
    num_layers: int | None = None
    sliding_window: bool | None = None
    size_gb: float | None = None
    max_position_embeddings: int | None = None
    source: str | None = None


@lru_cache(maxsize=4)
def load_rule_file(path: Path = RULES_FILE) -> RuleFile:
    try:
        return RuleFile.model_validate(yaml.load(path.read_text(), Loader=DATA_LOADER))
    except ValidationError as error:
        raise ValueError(f"{path}: {error}") from None


def host_row(release: str, rules: RuleFile | None = None) -> HostRow | None:
    return next((row for row in (rules or load_rule_file()).hosts if row.release == release), None)


def series_key(series: str) -> tuple[int, ...]:
    return tuple(int(n) for n in series.split("."))


def driver_kernel_problem(driver_version: str, kernel_series: str, rules: RuleFile | None = None) -> str | None:
    """Why a driver's kernel modules do not build on a kernel series, or None."""
    branch = int(driver_version.split(".")[0])
    for row in (rules or load_rule_file()).driver_kernels:
        if branch in row.branches and series_key(kernel_series) >= series_key(row.from_kernel):
            return f"{row.reason} [{row.source}]"
    return None


def model_facts(repo: str, rules: RuleFile | None = None) -> ModelFacts:
    """Facts of a model repository, from every matching row of the known-models table (later rows win)."""
    merged: dict[str, Any] = {}
    for row in (rules or load_rule_file()).models:
        if fnmatch.fnmatchcase(repo, row.repo):
            merged.update({k: v for k, v in row.model_dump(exclude={"repo"}).items() if v is not None})
    return ModelFacts(family=merged.get("family"), gdn_hybrid=bool(merged.get("gdn_hybrid")),
                      num_layers=merged.get("num_layers"), sliding_window=merged.get("sliding_window"),
                      size_gb=merged.get("size_gb"), max_position_embeddings=merged.get("max_position_embeddings"),
                      source=merged.get("source"))


def release_commit(package: str, version: str, rules: RuleFile | None = None) -> str | None:
    """The full commit the release's tag names in the package's upstream repository (None: not recorded)."""
    return (rules or load_rule_file()).release_commits.get(package, {}).get(version)


def dataset_rows(repo: str, split: str, subset: str | None = None, rules: RuleFile | None = None) -> DatasetRow | None:
    """The known size of one split of a dataset (None: not in the table)."""
    for row in (rules or load_rule_file()).datasets:
        if (row.repo, row.split, row.subset) == (repo, split, subset):
            return row
    return None


def dataset_files(repo: str, revision: str, rules: RuleFile | None = None) -> DatasetFilesRow | None:
    """The known file listing of a dataset repository at a commit (None: not in the table)."""
    for row in (rules or load_rule_file()).dataset_files:
        if (row.repo, row.revision) == (repo, revision):
            return row
    return None


def dataset_overlaps(rules: RuleFile | None = None) -> tuple[DatasetOverlapRow, ...]:
    return (rules or load_rule_file()).dataset_overlaps


def dataset_lengths(repo: str, rules: RuleFile | None = None) -> DatasetLengthsRow | None:
    """The published length distribution of a dataset's rows (None: it publishes none we know of)."""
    return next((row for row in (rules or load_rule_file()).dataset_lengths if row.repo == repo), None)


def engine_facts(package: str, version: str, rules: RuleFile | None = None) -> EngineFacts:
    """Every `engines` row of `package` whose range holds `version`, merged in file order."""
    constraints: list[str] = []
    renames: dict[str, str] = {}
    redundant: set[str] = set()
    prs: set[int] = set()
    reasoning = convert = train = prepare = None
    defaults: dict[str, Any] = {}
    removed: set[str] = set()
    sources = []
    for row in (rules or load_rule_file()).engines:
        if row.package != package or not row.holds(version):
            continue
        constraints += row.lock_constraints
        renames.update(row.flag_renames)
        redundant.update(row.redundant_environment)
        prs.update(row.contains_prs)
        reasoning = row.reasoning_field or reasoning
        convert, train, prepare = row.convert or convert, row.train or train, row.prepare or prepare
        defaults.update(row.train_defaults)
        removed.update(row.removed_train_flags)
        sources.append(" ".join(row.source.split()))
    return EngineFacts(package=package, version=version, lock_constraints=tuple(constraints),
                       flag_renames=tuple(sorted(renames.items())), redundant_environment=frozenset(redundant),
                       reasoning_field=reasoning, contains_prs=frozenset(prs), convert=convert, train=train,
                       prepare=prepare, train_defaults=tuple(sorted(defaults.items())),
                       removed_train_flags=frozenset(removed), sources=tuple(sources))


def version_key(text: str) -> tuple:
    """Order PEP 440 releases of the shape the config accepts: 0.5.10 < 0.5.10.post1 < 0.5.11rc1 < 0.5.11."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?(?:(a|b|rc)(\d+)|\.post(\d+)|\.dev(\d+))?$", text)
    if not match:
        raise ValueError(f"{text!r} is not a release")
    # 0.7.0 is 0.7.0.0: a fourth number orders after the three it extends
    release = tuple(int(match[i] or 0) for i in (1, 2, 3, 4))
    if match[8] is not None:
        return release + (-2, int(match[8]))
    if match[5] is not None:
        return release + (-1, {"a": 0, "b": 1, "rc": 2}[match[5]] * 10_000 + int(match[6]))
    return release + (0, int(match[7] or 0))
