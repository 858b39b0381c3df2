"""`gpuhosts upgrades STACK`: for each release a stack pins, the newer ones the compatibility data knows, whether the
plan accepts a bump to each, and what the bump changes beyond the version.

A release is known when gpuhosts has checked something of it: a committed lock (locks/), the `newest` row that
`make verify-engines` checks against the engines' own parsers, or a rule that names it. Each candidate is tried by
changing only that version in the stack's values and validating the whole stack as `gpuhosts plan` does, so a
refusal names the field and the fix. What else changes is read from the rendered command lines and environments
of both sides (flags renamed or gone, variables no longer set) and, for the trainer, from the compatibility rows
(how a checkpoint is converted and training starts).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from gpuhosts.compat_data import engine_facts, load_rule_file
from gpuhosts.config import DCGM_EXPORTER_VERSION, ConfigError, StackKind, stack_kind
from gpuhosts.engines import driver_for
from gpuhosts.locks import LOCKS_DIR
from gpuhosts.plans.inference_service import engine_args, engine_environment
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import require_locks, validate_stack, validate_trainer_stack

LOCK_NAME = re.compile(r"^(?P<package>[a-z0-9-]+?)(?:-all)?-(?P<version>\d[\w.]*)-py\d+\.\d+\.txt$")
RULE_RELEASE = re.compile(r"^==(?P<version>\d[\w.]*)$")


@dataclass
class Bump:
    where: str          # the stack field that pins the release
    package: str
    pinned: str
    release: str
    accepted: bool
    refusals: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    def line(self) -> str:
        verdict = "accepted" if self.accepted else "refused"
        text = f"{self.where}: {self.package} {self.pinned} → {self.release}: {verdict}"
        details = self.changes if self.accepted else self.refusals
        return text + "".join(f"\n    - {detail}" for detail in details or ["nothing else changes"])


def known_releases(package: str, locks_dir: Path = LOCKS_DIR) -> list[str]:
    """Every release of `package` the compatibility data or the committed locks know, oldest first."""
    rules = load_rule_file()
    found = {m["version"] for p in locks_dir.glob("*.txt") if (m := LOCK_NAME.match(p.name)) and
             m["package"] == package}
    if package in rules.newest:
        found.add(rules.newest[package])
    found |= set(rules.release_commits.get(package, {}))
    for rule in rules.rules:
        if rule.params.get("engine") == package and (m := RULE_RELEASE.match(str(rule.params.get("versions", "")))):
            found.add(m["version"])
    return sorted(found, key=_release_key)


def _release_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def newer(package: str, pinned: str) -> list[str]:
    return [r for r in known_releases(package) if _release_key(r) > _release_key(pinned)]


def _load(values: dict[str, Any], secure: set[str], other_keys) -> Any:
    """The stack validated and planned, as `gpuhosts plan` does: some refusals come only from the plan (a release
    the metric catalog does not know, say)."""
    if stack_kind(values) is StackKind.TRAINER:
        trainer = require_locks(validate_trainer_stack(values, secure, other_keys))
        plan_training_node(trainer)
        return trainer
    config = require_locks(validate_stack(values, secure, other_keys))
    plan_host(config)
    return config


def _validate(values: dict[str, Any], secure: set[str], other_keys) -> tuple[Any, list[str]]:
    try:
        return _load(values, secure, other_keys), []
    except ConfigError as error:
        return None, [str(problem) for problem in error.problems] or [str(error)]
    except ValueError as error:
        return None, [str(error)]


def _words_changed(before: list[str], after: list[str]) -> list[str]:
    flags = lambda words: [w for w in words if w.startswith("--")]
    gone = [w for w in flags(before) if w not in flags(after)]
    new = [w for w in flags(after) if w not in flags(before)]
    return [f"flag {g} → {n}" for g, n in zip(gone, new)] + [f"flag {g} no longer rendered" for g in gone[len(new):]] \
        + [f"flag {n} newly rendered" for n in new[len(gone):]]


def _environment_changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [f"environment {k} no longer set" for k in before if k not in after] + \
        [f"environment {k}={after[k]} newly set" for k in after if k not in before] + \
        [f"environment {k}: {before[k]} → {after[k]}" for k in before if k in after and before[k] != after[k]]


# The trainer defaults the stack renders itself (training.hyper), and one it takes from the converted checkpoint.
RENDERED_DEFAULTS = {"loss_fn": "hyper.lossFn", "max_anchors": "hyper.maxAnchors", "lr": "hyper.lr",
                     "block_size": "hyper.blockSize", "per_position_loss_weight": "hyper.perPositionLossWeight"}
FROM_CHECKPOINT = {"num_layers"}


def _facts_changed(package: str, pinned: str, release: str) -> list[str]:
    old, new = engine_facts(package, pinned), engine_facts(package, release)
    changes = []
    for label, a, b in (("reasoning field", old.reasoning_field, new.reasoning_field),
                        ("checkpoint conversion", old.convert, new.convert),
                        ("training entry point", old.train, new.train)):
        if a != b:
            changes.append(f"{label}: {a} → {b}")
    if (old.prepare, new.prepare) == ("script", "cli"):
        changes.append("data step: scripts/prepare_data.py → `speculators prepare-data`, each conversation rendered "
                       "by the verifier's vLLM server (the hidden-state server, which the data step now waits for); "
                       "the data set is tokenized again")
    before, after = dict(old.train_defaults), dict(new.train_defaults)
    for name in sorted(set(before) | set(after)):
        if before.get(name) == after.get(name):
            continue
        if name in RENDERED_DEFAULTS:
            changes.append(f"trainer default {name}: {before.get(name)} → {after.get(name)}; the stack renders "
                           f"{RENDERED_DEFAULTS[name]}, so training does not change")
        elif name in FROM_CHECKPOINT:
            changes.append(f"trainer default {name}: {before.get(name)} → {after.get(name)}; taken from the "
                           "converted drafter, so training does not change")
        elif name not in after:
            changes.append(f"trainer setting {name} ({before[name]} in {pinned}) is gone: training changes")
    for flag in sorted(new.removed_train_flags - old.removed_train_flags):
        changes.append(f"trainer flag {flag} no longer exists; an extraArgs entry with it is refused by the trainer")
    gained = sorted(new.contains_prs - old.contains_prs)
    if gained:
        changes.append("contains PRs " + ", ".join(map(str, gained)))
    return changes


def service_bumps(values: dict[str, Any], secure: set[str], other_keys=()) -> list[Bump]:
    stack = _load(values, secure, other_keys)
    bumps = []
    for index, service in enumerate(stack.services):
        for release in newer(service.engine.name, service.engine.version):
            bumped = copy.deepcopy(values)
            bumped["services"][index]["engine"]["version"] = release
            new_stack, refusals = _validate(bumped, secure, other_keys)
            bump = Bump(f"services[{index}] ({service.name}).engine.version", service.engine.name,
                        service.engine.version, release, new_stack is not None, refusals)
            if new_stack is not None:
                after = new_stack.services[index]
                bump.changes = (_words_changed(engine_args(service), engine_args(after))
                                + _environment_changed(engine_environment(service, stack),
                                                       engine_environment(after, new_stack))
                                + _facts_changed(driver_for(service.engine).package, service.engine.version, release))
            bumps.append(bump)
    return bumps


def trainer_bumps(values: dict[str, Any], secure: set[str], other_keys=()) -> list[Bump]:
    stack = _load(values, secure, other_keys)
    bumps = []
    for name in ("speculators", "vllm"):
        spec = getattr(stack.training, name)
        for release in newer(name, spec.version):
            bumped = copy.deepcopy(values)
            bumped["training"][name]["version"] = release
            new_stack, refusals = _validate(bumped, secure, other_keys)
            bump = Bump(f"training.{name}.version", name, spec.version, release, new_stack is not None, refusals)
            if new_stack is not None:
                bump.changes = _facts_changed(name, spec.version, release)
            bumps.append(bump)
    return bumps


def pinned_without_candidates(values: dict[str, Any]) -> list[str]:
    """What the stack pins that the compatibility data knows no newer release of: said, not left out."""
    lines = []
    nvidia = values.get("nvidia") or {}
    if nvidia.get("version"):
        lines.append(f"nvidia.version: driver {nvidia['version']}: the compatibility data knows no newer release")
    if values.get("monitoring") is not None:
        exporter = (values.get("monitoring") or {}).get("dcgmExporterVersion", DCGM_EXPORTER_VERSION)
        lines.append(f"monitoring.dcgmExporterVersion: dcgm-exporter {exporter}: the compatibility data knows no "
                     "newer release (its metric catalog row is gpuhosts/metrics-catalog.yaml)")
    return lines


def upgrade_report(values: dict[str, Any], secure: set[str], other_keys=()) -> tuple[list[Bump], list[str]]:
    if stack_kind(values) is StackKind.TRAINER:
        return trainer_bumps(values, secure, other_keys), []
    return service_bumps(values, secure, other_keys), pinned_without_candidates(values)
