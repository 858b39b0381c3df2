"""`gpuhosts diff`: two offline plans compared in the words of their summary, for a person reviewing a change.

`diff -r` of two plan folders is exact but long; this review says per host which units come, change and go (and
what a removed unit's teardown undoes, in the words its plan gave it), what changes in each service's command line
and environment, where each GPU goes, whether the host must reboot and which containers restart, which secrets
change (by name), and then the changed files and scripts as unified diffs. `--markdown` shapes it as one pull
request comment within GitHub's limit. With `--base GIT_REF` it plans both sides itself.

Exit codes follow `terraform plan -detailed-exitcode`: 0 no change, 2 changes, 1 error.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuhosts import exit_codes
from gpuhosts.config import NAMESPACE
from gpuhosts.plan import PLAN_MARKER, SCRIPTS, secret_versions
from gpuhosts.render import PROJECT_ROOT

EXIT_NO_CHANGE, EXIT_ERROR, EXIT_INVALID, EXIT_CHANGES = exit_codes.OK, exit_codes.ERROR, exit_codes.INVALID, exit_codes.DIFFERENCES
# GitHub refuses an issue or pull request comment body longer than this many characters.
COMMENT_LIMIT = 65_536
# The first line of the comment, so a workflow finds and edits its one comment instead of adding another.
PREVIEW_MARKER = "<!-- gpuhosts-preview -->"
# Fields of unit.json that say where a unit sits or describe it: a change there alone changes nothing on a host.
ANNOTATIONS = ("applyOrder", "neededBy", "undoes", "effects")


class DiffError(Exception):
    pass


@dataclass(frozen=True)
class HostPlan:
    desired: dict[str, Any]
    units: dict[str, dict[str, Any]]
    # "commands/<unit>/<script>.sh" -> text
    scripts: dict[str, str]
    # an installed file: "/etc/…" on the host, "CT 129:/etc/…" in a container -> text
    files: dict[str, str]


@dataclass(frozen=True)
class Plan:
    hosts: dict[str, HostPlan]
    warnings: tuple[str, ...] = ()


NO_PLAN = Plan({})


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DiffError(f"{path}: cannot be read as JSON ({error}); give a folder `gpuhosts plan` wrote") from None


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def load_plan(folder: Path) -> Plan:
    """A plan folder as `gpuhosts plan` wrote it; anything else is an error naming the path."""
    if not folder.is_dir():
        raise DiffError(f"{folder}: no such folder; give a folder that `gpuhosts plan STACK --out DIR` wrote")
    if not (folder / PLAN_MARKER).is_file() or not (folder / "summary.json").is_file():
        raise DiffError(f"{folder}: not a gpuhosts plan (no {PLAN_MARKER} or summary.json); "
                        "write one with `gpuhosts plan STACK --out DIR`")
    summary = _read_json(folder / "summary.json")
    if not isinstance(summary, dict) or not isinstance(summary.get("hosts"), dict):
        raise DiffError(f"{folder / 'summary.json'}: has no `hosts` mapping; write the plan again with `gpuhosts plan`")
    hosts = {}
    for host, desired in summary["hosts"].items():
        base = folder / "hosts" / host
        if not base.is_dir():
            raise DiffError(f"{base}: missing, though summary.json names host {host}; write the plan again")
        units, scripts, files = {}, {}, {}
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            parts = path.relative_to(base).parts
            if parts[0] == "commands" and len(parts) == 3:
                if parts[2] == "unit.json":
                    units[parts[1]] = _read_json(path)
                else:
                    scripts["/".join(parts)] = _text(path)
            elif parts[0] == "containers" and len(parts) > 2:
                files[f"CT {parts[1]}:/" + "/".join(parts[2:])] = _text(path)
            elif parts != ("graph.json",):
                files["/" + "/".join(parts)] = _text(path)
        hosts[host] = HostPlan(desired or {}, units, scripts, files)
    return Plan(hosts, tuple(summary.get("warnings") or ()))


# --- the review of one host ---------------------------------------------------------------------------------


@dataclass
class HostReview:
    host: str
    presence: str = "changed"  # or "added" / "removed": the host is only in one plan
    added: list[str] = field(default_factory=list)
    changed: list[tuple[str, str]] = field(default_factory=list)  # (unit, what changed)
    removed: list[tuple[str, str]] = field(default_factory=list)  # (unit, what its teardown undoes)
    gpus: list[str] = field(default_factory=list)
    services: list[tuple[str, list[str]]] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    reboot: list[str] = field(default_factory=list)
    allow_reboot: bool = False
    restarts: dict[str, tuple[bool, list[str]]] = field(default_factory=dict)  # container -> (allowed, why)
    actions: list[str] = field(default_factory=list)  # what `pulumi up` does to services, gates and benchmarks
    other: list[str] = field(default_factory=list)
    new_files: list[str] = field(default_factory=list)
    gone_files: list[str] = field(default_factory=list)
    file_diffs: list[tuple[str, str]] = field(default_factory=list)  # (label, unified diff)

    @property
    def has_changes(self) -> bool:
        return bool(self.presence != "changed" or self.added or self.changed or self.removed or self.gpus
                    or self.services or self.secrets or self.other or self.new_files or self.gone_files
                    or self.file_diffs)


def _short(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _effects(unit: dict[str, Any] | None) -> dict[str, Any]:
    return (unit or {}).get("effects") or {}


def _unit_change(base: dict[str, Any], head: dict[str, Any], base_plan: HostPlan, head_plan: HostPlan,
                 key: str) -> str:
    """What changed in a unit both plans have, in a few words; empty when nothing does."""
    what = []
    b_desired, h_desired = base.get("desired") or {}, head.get("desired") or {}
    facts = sorted(name for name in set(b_desired) | set(h_desired) if b_desired.get(name) != h_desired.get(name))
    if facts:
        what.append("facts: " + ", ".join(facts))
    scripts = [name + ".sh" for name in SCRIPTS
               if base_plan.scripts.get(f"commands/{key}/{name}.sh") != head_plan.scripts.get(f"commands/{key}/{name}.sh")]
    if scripts:
        what.append("scripts: " + ", ".join(scripts))
    rest = sorted(k for k in set(base) | set(head)
                  if k not in (*ANNOTATIONS, "desired", "stdinVersion") and base.get(k) != head.get(k))
    if base.get("stdinVersion") != head.get("stdinVersion") and base.get("stdin") == head.get("stdin"):
        what.append(f"its secret {(head.get('stdin') or '').strip('[]').removeprefix('secret ')} changed")
    if rest:
        what.append(", ".join(line for k in rest for line in _leaf_changes(k, base.get(k), head.get(k))))
    return "; ".join(what)


def _reboot_facts(base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[str]:
    """The facts of a unit whose change needs a reboot, as either side declares them."""
    names = set(_effects(base).get("rebootOn") or ()) | set(_effects(head).get("rebootOn") or ())
    b_desired, h_desired = (base or {}).get("desired") or {}, (head or {}).get("desired") or {}
    return sorted(name for name in names if b_desired.get(name) != h_desired.get(name))


def _gpu_places(desired: dict[str, Any]) -> dict[str, str]:
    """Where each GPU goes, in a reviewer's words."""
    places = {}
    containers = desired.get("containers") or {}
    for address, gpu in (desired.get("gpus") or {}).items():
        if not isinstance(gpu, dict) or "use" not in gpu:
            continue
        use = gpu.get("use")
        where = {"vfio": "vfio-pci (for VMs)", "host": "nvidia on the host"}.get(use, use)
        if use == "container":
            held = [vmid for vmid, c in containers.items() if address in (c.get("gpus") or [])]
            where = "CT " + ", ".join(held) if held else "a container"
        places[address] = f"{gpu.get('model', '?')}: {where}"
    training = desired.get("training")
    if isinstance(training, dict) and isinstance(training.get("gpus"), dict):
        gpus = training["gpus"]
        places["hidden-state server"] = f"GPUs {gpus.get('server')}"
        places["training"] = f"GPUs {gpus.get('training')}"
        places["node"] = f"{gpus.get('count')}× {gpus.get('model')}"
    return places


def _services(desired: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each service the summary describes, by a name a reviewer recognises."""
    found = {}
    for vmid, container in (desired.get("containers") or {}).items():
        for name, service in (container.get("services") or {}).items():
            found[f"ct{vmid} {name}"] = service
    training = desired.get("training")
    if isinstance(training, dict):
        for name, label in (("server", "hidden-state server"), ("training", "training job"),
                            ("convert", "drafter conversion"), ("monitor", "training monitor")):
            if isinstance(training.get(name), dict):
                found[label] = training[name]
    return found


def _words_change(old: list[str], new: list[str]) -> list[str]:
    """A command line's change as the words that differ, each replaced word after the flag it belongs to."""
    changes = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before = f"after {old[i1 - 1]} " if i1 > 0 else ""
        if tag == "replace":
            changes.append(f"{before}{shlex.join(old[i1:i2])} → {shlex.join(new[j1:j2])}")
        elif tag == "delete":
            changes.append(f"removed {before}{shlex.join(old[i1:i2])}".replace("removed after", "removed, after"))
        else:
            changes.append(f"added {before}{shlex.join(new[j1:j2])}".replace("added after", "added, after"))
    return changes


def _service_changes(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    if old is None:
        return [f"new service: {shlex.join(new.get('argv') or new.get('args') or [])}".rstrip(": ")]
    if new is None:
        return ["service removed"]
    lines = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key in ("argv", "args") and isinstance(before, list) and isinstance(after, list):
            lines += [f"{key}: {change}" for change in _words_change([str(w) for w in before], [str(w) for w in after])]
        elif key == "environment" and isinstance(before, dict) and isinstance(after, dict):
            for variable in sorted(set(before) | set(after)):
                if variable not in before:
                    lines.append(f"environment: added {variable}={after[variable]}")
                elif variable not in after:
                    lines.append(f"environment: removed {variable}")
                elif before[variable] != after[variable]:
                    lines.append(f"environment: {variable}: {before[variable]} → {after[variable]}")
        else:
            lines += _leaf_changes(key, before, after)
    return lines


def _leaf_changes(key: str, before: Any, after: Any) -> list[str]:
    """Each setting that changed under `key`, by its dotted path, old → new: never two whole mappings."""
    old, new = _flatten(before, key), _flatten(after, key)
    return [f"{path}: {_short(old.get(path))} → {_short(new.get(path))}"
            for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path)]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        flat = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _other_changes(base: dict[str, Any], head: dict[str, Any]) -> list[str]:
    """Summary changes no section above shows: the driver, boot settings, containers' settings, the training."""
    def strip(desired: dict[str, Any]) -> dict[str, Any]:
        rest = {k: v for k, v in desired.items() if k not in ("gpus", "vfio", "nvidia")}
        rest["containers"] = {vmid: {k: v for k, v in c.items() if k not in ("services", "gpus", "devices")}
                              for vmid, c in (desired.get("containers") or {}).items()}
        if isinstance(desired.get("training"), dict):
            rest["training"] = {k: v for k, v in desired["training"].items()
                                if k not in ("server", "training", "convert", "monitor", "gpus")}
        return _flatten(rest)

    b, h = strip(base), strip(head)
    return [f"{key}: {_short(b.get(key))} → {_short(h.get(key))}"
            for key in sorted(set(b) | set(h)) if b.get(key) != h.get(key)]


def _secrets(plan: HostPlan) -> dict[str, str | None]:
    """Secret name → the digest of its encrypted stack-file value (None: set only at deploy time)."""
    found: dict[str, str | None] = {}
    for unit in plan.units.values():
        stdin = unit.get("stdin")
        match = re.fullmatch(r"\[secret ([^\]]+)\]", stdin or "")
        if match:
            found[match.group(1)] = found.get(match.group(1)) or unit.get("stdinVersion")
    return found


def _file_diff(label: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"base {label}", tofile=f"head {label}", n=3)).rstrip("\n")


def review_host(host: str, base: HostPlan | None, head: HostPlan | None) -> HostReview:
    review = HostReview(host, presence="added" if base is None else "removed" if head is None else "changed")
    b = base or HostPlan({}, {}, {}, {})
    h = head or HostPlan({}, {}, {}, {})
    review.allow_reboot = bool((h if head is not None else b).desired.get("allowReboot"))
    reboot_units: dict[str, list[str]] = {}
    restarts: dict[str, tuple[bool, list[str]]] = {}

    def restart(unit: dict[str, Any], key: str, why: str) -> None:
        effects = _effects(unit)
        if effects.get("restartsContainer") is not None:
            vmid = str(effects["restartsContainer"])
            allowed, reasons = restarts.get(vmid, (bool(effects.get("restartAllowed")), []))
            restarts[vmid] = (allowed, reasons + [f"{key} {why}"])

    for key in sorted(set(b.units) | set(h.units)):
        old, new = b.units.get(key), h.units.get(key)
        if old is None:
            review.added.append(key)
            if _effects(new).get("rebootOn"):
                reboot_units[key] = ["added"]
            restart(new, key, "added")
        elif new is None:
            undoes = old.get("undoes") or "its teardown runs (the base plan names no undo text)"
            review.removed.append((key, undoes))
            if _effects(old).get("rebootOn"):
                reboot_units[key] = ["removed"]
            restart(old, key, "removed")
        else:
            what = _unit_change(old, new, b, h, key)
            if what:
                review.changed.append((key, what))
                facts = _reboot_facts(old, new)
                if facts:
                    reboot_units[key] = facts
                restart(new, key, "changed")
    review.reboot = [f"{key} ({', '.join(facts)})" for key, facts in reboot_units.items()]
    review.restarts = restarts

    b_places, h_places = _gpu_places(b.desired), _gpu_places(h.desired)
    for address in sorted(set(b_places) | set(h_places)):
        if b_places.get(address) != h_places.get(address):
            review.gpus.append(f"{address}: {b_places.get(address, 'not in the plan')} → "
                               f"{h_places.get(address, 'not in the plan')}")

    b_services, h_services = _services(b.desired), _services(h.desired)
    for name in sorted(set(b_services) | set(h_services)):
        lines = _service_changes(name, b_services.get(name), h_services.get(name))
        if lines:
            review.services.append((name, lines))

    b_secrets, h_secrets = _secrets(b), _secrets(h)
    for name in sorted(set(b_secrets) | set(h_secrets)):
        if name not in b_secrets:
            review.secrets.append(f"{name} now read by this host's units")
        elif name not in h_secrets:
            review.secrets.append(f"{name} no longer read by this host's units")
        elif b_secrets[name] != h_secrets[name]:
            review.secrets.append(f"{name} changed (its encrypted value in the stack file differs)")

    review.other = _other_changes(b.desired, h.desired)
    review.actions = _actions(b, h, set(review.added) | {key for key, _ in review.changed})

    for kind, old_files, new_files in (("file", b.files, h.files), ("script", b.scripts, h.scripts)):
        for label in sorted(set(old_files) | set(new_files)):
            if label not in old_files:
                review.new_files.append(f"{label} ({len(new_files[label].splitlines())} lines)")
            elif label not in new_files:
                review.gone_files.append(label)
            elif old_files[label] != new_files[label]:
                review.file_diffs.append((label, _file_diff(label, old_files[label], new_files[label])))
    return review


def _systemd_facts(unit: dict[str, Any] | None) -> dict[str, list[str]]:
    """A unit's systemd services and their desired state words (`enabled active`)."""
    return {fact.removeprefix("systemd "): str(value).split()
            for fact, value in ((unit or {}).get("desired") or {}).items() if fact.startswith("systemd ")}


def _service_of(desired: dict[str, Any], systemd_unit: str) -> tuple[str, str, dict[str, Any]] | None:
    """(vmid, name, summary) of the container service that runs as `systemd_unit`."""
    for vmid, container in (desired.get("containers") or {}).items():
        for name, service in (container.get("services") or {}).items():
            if service.get("unit") == systemd_unit:
                return str(vmid), name, service
    return None


def _benchmark_of(desired: dict[str, Any], key: str) -> tuple[str, str, dict[str, Any]] | None:
    for vmid, container in (desired.get("containers") or {}).items():
        for name, bench in (container.get("benchmarks") or {}).items():
            if bench.get("unit") == key:
                return str(vmid), name, bench
    return None


def _state(words: list[str] | None) -> str:
    return "running" if words and "active" in words else "stopped"


def _actions(base: HostPlan, head: HostPlan, touched: set[str]) -> list[str]:
    """What `pulumi up` does beyond writing files, for the units whose inputs change (`touched`), in apply order:
    which services start, stop or restart, which deploy gates measure again (and which do not, though the service
    they measure restarts), and which benchmarks run again, stopping the services on their GPUs one at a time."""
    lines: list[tuple[int, str]] = []
    restarted: dict[str, str] = {}  # unit key -> the service it restarts
    order = {key: unit.get("applyOrder") or 0 for key, unit in head.units.items()}

    def where(systemd_unit: str) -> str:
        found = _service_of(head.desired, systemd_unit)
        return f"{systemd_unit} in CT {found[0]}" if found else systemd_unit

    for key in sorted(touched, key=lambda k: (order.get(k, 0), k)):
        old, new = base.units.get(key), head.units.get(key)
        if new is None:
            continue
        old_facts, new_facts = (old or {}).get("desired") or {}, new.get("desired") or {}
        files_changed = any(fact.startswith("file ") and old_facts.get(fact) != value for fact, value in new_facts.items())
        before, after = _systemd_facts(old), _systemd_facts(new)
        for systemd_unit, words in sorted(after.items()):
            was, now = (_state(before[systemd_unit]) if systemd_unit in before else None), _state(words)
            if was is None and now == "running":
                text = f"starts {where(systemd_unit)}"
            elif was is None:
                text = f"installs {where(systemd_unit)} stopped"
            elif was != now:
                text = f"{'starts' if now == 'running' else 'stops'} {where(systemd_unit)}"
            elif files_changed and now == "running":
                text = f"restarts {where(systemd_unit)} with its new settings (down until it is up again)"
                restarted[key] = systemd_unit
            elif files_changed:
                text = f"rewrites {where(systemd_unit)}, which stays stopped"
            else:
                continue
            lines.append((order.get(key, 0), f"{key}: {text}"))
        bench = _benchmark_of(head.desired, key)
        if bench is not None:
            vmid, name, spec = bench
            because = sorted(set(new.get("needs") or ()) & touched)
            services = {n: s for n, s in ((head.desired.get("containers") or {}).get(vmid, {}).get("services") or {}).items()}
            compared = [n for n in spec.get("services") or () if n in services]
            gpus = sorted({g for n in compared for g in services[n].get("gpus") or ()})
            back = ", ".join(f"{n} {'running' if services[n].get('enabled') else 'stopped'}" for n in compared)
            lines.append((order.get(key, 0), (
                f"{key}: the benchmark {name} runs {'again' if old is not None else ''}".rstrip()
                + (f", as its inputs changed with {', '.join(because)}" if because else "")
                + f": on CT {vmid}'s GPUs {', '.join(gpus)} it runs {', '.join(compared)} one at a time, stopping "
                f"every other service on those GPUs while each is measured, then puts them back as declared ({back})")))
        elif new.get("kind") == "DeployGate":
            measured = [where(u) for n in new.get("needs") or () for u in _systemd_facts(head.units.get(n))]
            lines.append((order.get(key, 0), f"{key}: measures {', '.join(measured) or 'its service'}"
                                             f"{' again' if old is not None else ''} once it answers; `pulumi up` "
                                             "fails below the gate's thresholds"))
    for key, systemd_unit in restarted.items():
        for dependent in head.units[key].get("neededBy") or ():
            if dependent not in touched and (head.units.get(dependent) or {}).get("kind") == "DeployGate":
                lines.append((order.get(dependent, 0), f"{dependent}: does not run (its inputs are unchanged), so the "
                                                       f"restarted {systemd_unit} is not measured again"))
    return [text for _, text in sorted(lines, key=lambda item: item[0])]


def review_plans(base: Plan, head: Plan) -> list[HostReview]:
    return [review_host(host, base.hosts.get(host), head.hosts.get(host))
            for host in sorted(set(base.hosts) | set(head.hosts))]


# --- words ----------------------------------------------------------------------------------------------------


def _reboot_line(review: HostReview) -> str:
    if not review.reboot:
        return "not expected"
    why = "; ".join(review.reboot)
    if review.allow_reboot:
        return f"expected: the host reboots during `pulumi up` (allowReboot: true) — {why}"
    return (f"expected but not done (allowReboot: false): the stack output rebootRequired stays true until the host "
            f"is rebooted by hand — {why}")


def _restart_lines(review: HostReview) -> list[str]:
    lines = []
    for vmid, (allowed, why) in sorted(review.restarts.items()):
        state = "restarts (allowRestart: true)" if allowed else "restart pending (allowRestart: false: it gets the change at its next restart)"
        lines.append(f"CT {vmid} {state} — {', '.join(why)}")
    return lines


def summary_lines(review: HostReview) -> list[str]:
    """The review of one host as plain lines (no files): what the summary of a comment holds too."""
    if not review.has_changes:
        return [f"host {review.host}: no change"]
    head = {"added": "new host (every unit is created)", "removed": "host removed from the stack (every unit's teardown runs)"}
    lines = [f"host {review.host}: {head.get(review.presence, '')}".rstrip(": ") if review.presence != "changed"
             else f"host {review.host}: {len(review.added)} unit(s) added, {len(review.changed)} changed, "
                  f"{len(review.removed)} removed"]
    lines += [f"  + {key}" for key in review.added]
    lines += [f"  ~ {key}: {what}" for key, what in review.changed]
    lines += [f"  - {key}: WARNING its teardown undoes: {undoes}" for key, undoes in review.removed]
    lines.append(f"  reboot: {_reboot_line(review)}")
    restarts = _restart_lines(review)
    lines.append("  container restarts: " + ("none" if not restarts else restarts[0]))
    lines += [f"    {line}" for line in restarts[1:]]
    if review.actions:
        lines.append("  `pulumi up` then:")
        lines += [f"    {line}" for line in review.actions]
    if review.gpus:
        lines.append("  GPU assignment:")
        lines += [f"    {line}" for line in review.gpus]
    for name, changes in review.services:
        lines.append(f"  service {name}:")
        lines += [f"    {line}" for line in changes]
    if review.secrets:
        lines.append("  secrets (by name):")
        lines += [f"    {line}" for line in review.secrets]
    if review.other:
        lines.append("  summary:")
        lines += [f"    {line}" for line in review.other]
    if review.file_diffs or review.new_files or review.gone_files:
        lines.append(f"  files: {len(review.file_diffs)} changed, {len(review.new_files)} new, "
                     f"{len(review.gone_files)} removed")
    return lines


@dataclass
class StackReview:
    stack: str
    hosts: list[HostReview]
    note: str = ""  # why a side is missing, for a stack planned from git
    warnings: list[str] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return any(host.has_changes for host in self.hosts)


def review_stack(stack: str, base: Plan, head: Plan, note: str = "") -> StackReview:
    warnings = [f"new warning: {w}" for w in head.warnings if w not in base.warnings]
    return StackReview(stack, review_plans(base, head), note, warnings)


def render_text(reviews: list[StackReview]) -> str:
    out = []
    for stack in reviews:
        out.append(f"stack {stack.stack}: " + ("changes" if stack.has_changes else "no change")
                   + (f" ({stack.note})" if stack.note else ""))
        for host in stack.hosts:
            out += summary_lines(host)
            out += [f"  new {label}" for label in host.new_files]
            out += [f"  removed {label}" for label in host.gone_files]
            out += [text for _, text in host.file_diffs]
        out += [f"  {w}" for w in stack.warnings]
    return "\n".join(out) + "\n"


def _fence(text: str) -> str:
    # A fence longer than any backtick run inside, so a file holding ``` cannot end the block.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _md_escape(text: str) -> str:
    # Config values reach the summary (paths, flags): markup in them must stay text in the comment.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _md_summary(stack: StackReview) -> str:
    title = f"### Stack `{stack.stack}`: " + ("changes" if stack.has_changes else "no change")
    lines = [title + (f" — {stack.note}" if stack.note else ""), ""]
    for host in stack.hosts:
        for line in summary_lines(host):
            depth = (len(line) - len(line.lstrip(" "))) // 2
            lines.append("  " * depth + "- " + _md_escape(line.strip()))
    lines += [f"- {w}" for w in stack.warnings]
    return "\n".join(lines) + "\n\n"


def _md_details(host: HostReview) -> tuple[str, str, str] | None:
    """(opening, body, closing) of a host's file changes; the body alone may be cut."""
    if not (host.file_diffs or host.new_files or host.gone_files):
        return None
    body = "\n".join([*(f"new {label}" for label in host.new_files), *(f"removed {label}" for label in host.gone_files),
                      *(text for _, text in host.file_diffs)])
    fence = _fence(body)
    opening = (f"<details><summary>{host.host}: files and scripts — {len(host.file_diffs)} changed, "
               f"{len(host.new_files)} new, {len(host.gone_files)} removed</summary>\n\n{fence}diff\n")
    return opening, body, f"\n{fence}\n\n</details>\n\n"


def render_markdown(reviews: list[StackReview], limit: int = COMMENT_LIMIT) -> str:
    """One comment: the marker, each stack's summary, each host's file changes in a collapsible block. The details
    are cut (and say so) to keep the whole within `limit`; the summaries are never cut."""
    changed = [s.stack for s in reviews if s.has_changes]
    head = (f"{PREVIEW_MARKER}\n## gpuhosts preview\n\n"
            + (f"Changes in {', '.join(f'`{s}`' for s in changed)}.\n\n" if changed else "No change in any stack.\n\n"))
    parts: list[Any] = [head]
    for stack in reviews:
        parts.append(_md_summary(stack))
        parts += [d for d in (_md_details(h) for h in stack.hosts) if d is not None]
    note = "\n… cut here: the comment limit of {limit} characters; run `gpuhosts diff` for the whole review\n"
    left_out = "<details><summary>{title}</summary>\n\nleft out: the comment limit; run `gpuhosts diff` locally\n</details>\n\n"
    fixed = sum(len(p) for p in parts if isinstance(p, str))
    details = [p for p in parts if not isinstance(p, str)]
    if fixed > limit:
        # Only summaries of thousands of units get here: cut them rather than fail the comment.
        text = "".join(p for p in parts if isinstance(p, str))
        tail = note.format(limit=limit)
        return text[:limit - len(tail)] + tail
    budget = limit - fixed
    out = []
    seen = 0
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        opening, body, closing = part
        whole = opening + body + closing
        seen += 1
        later = details[seen:]
        reserve = sum(len(left_out.format(title=o.split("</summary>")[0][len("<details><summary>"):])) for o, _, _ in later)
        if len(whole) + reserve <= budget:
            out.append(whole)
            budget -= len(whole)
            continue
        room = budget - reserve - len(opening) - len(closing) - len(note.format(limit=limit)) - 1
        title = opening.split("</summary>")[0][len("<details><summary>"):]
        if room > 200:
            cut = body[:room].rsplit("\n", 1)[0]
            text = opening + cut + "\n" + note.format(limit=limit).strip("\n") + closing
        else:
            text = left_out.format(title=title)
        if len(text) > budget - reserve:
            text = ""
        out.append(text)
        budget -= len(text)
    document = "".join(out)
    assert len(document) <= limit, len(document)
    return document


# --- planning both sides from git ---------------------------------------------------------------------------


def _run_plan(checkout: Path, stack: str, out: Path, side: str) -> Plan | None:
    """The plan of `stack` by the code and stack file of `checkout`; None when that side has no stack file."""
    if not (checkout / "stacks" / f"Pulumi.{stack}.yaml").is_file():
        return None
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", stack, "--out", str(out)],
                            cwd=checkout, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-8:])
        raise DiffError(f"the {side} plan of stack {stack} failed (gpuhosts plan exit {result.returncode}):\n{tail}")
    return load_plan(out)


def _git(root: Path, *args: str) -> bytes:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True)
    if result.returncode != 0:
        raise DiffError(f"git {' '.join(args)} in {root} failed: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def export_ref(root: Path, ref: str, into: Path) -> str:
    """The tree of `ref` unpacked into `into` (git archive: no worktree registered in the repository)."""
    try:
        commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
    except DiffError:
        raise DiffError(f"--base {ref}: not a commit of the repository {root}; give a branch, tag or commit") from None
    archive = _git(root, "archive", "--format=tar", commit)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


def _stack_secrets(checkout: Path, stack: str) -> dict[str, str]:
    path = checkout / "stacks" / f"Pulumi.{stack}.yaml"
    try:
        return secret_versions(path) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        # An unreadable stack file is the plan's error to name, and the plan of this side has run already.
        return {}


def review_from_git(root: Path, stacks: list[str], base_ref: str) -> list[StackReview]:
    """Each stack planned twice: by the working tree and by `base_ref`'s own code and stack file."""
    reviews = []
    with tempfile.TemporaryDirectory(prefix="gpuhosts-diff-") as scratch:
        scratch_dir = Path(scratch)
        checkout = scratch_dir / "base"
        checkout.mkdir()
        commit = export_ref(root, base_ref, checkout)
        # A stack on neither side is a misspelt name, not a stack without change: it would read as "no change".
        unknown = [stack for stack in stacks if not any((side / "stacks" / f"Pulumi.{stack}.yaml").is_file()
                                                        for side in (checkout, root))]
        if unknown:
            known = sorted({p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                            for side in (checkout, root) for p in (side / "stacks").glob("Pulumi.*.yaml")})
            raise DiffError(f"unknown stack {', '.join(unknown)}: no stacks/Pulumi.{unknown[0]}.yaml at "
                            f"{commit[:12]} nor in the working tree; give stacks that exist on one side at least "
                            f"(known: {', '.join(known) or 'none'})")
        for stack in stacks:
            base = _run_plan(checkout, stack, scratch_dir / f"base-{stack}", f"base ({commit[:12]})")
            head = _run_plan(root, stack, scratch_dir / f"head-{stack}", "head (working tree)")
            note = (f"new stack: no stacks/Pulumi.{stack}.yaml at {commit[:12]}" if base is None else
                    f"stack removed: no stacks/Pulumi.{stack}.yaml in the working tree" if head is None else "")
            review = review_stack(stack, base or NO_PLAN, head or NO_PLAN, note)
            # A secret no unit reads on stdin (the SSH key) still shows its rotation in the stack files.
            b_secrets, h_secrets = _stack_secrets(checkout, stack), _stack_secrets(root, stack)
            shown = " ".join(line for host in review.hosts for line in host.secrets)
            rotated = [f"{NAMESPACE}:{name} changed (its encrypted value in the stack file differs)"
                       for name in sorted(set(b_secrets) & set(h_secrets))
                       if b_secrets[name] != h_secrets[name] and f"{NAMESPACE}:{name}" not in shown]
            if rotated and review.hosts:
                review.hosts[0].secrets += rotated
            reviews.append(review)
    return reviews


# --- the command ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuhosts diff", description="Review a change: two plan folders, or stacks against a git ref.",
        epilog="exit codes: 0 no change, 2 changes, 1 error", exit_on_error=False)
    parser.add_argument("items", nargs="+", metavar="PLAN_OR_STACK",
                        help="BASE_PLAN HEAD_PLAN (two plan folders), or with --base one or more stack names")
    parser.add_argument("--base", metavar="GIT_REF", help="plan the stacks at this git ref and in the working tree")
    parser.add_argument("--markdown", action="store_true", help="a pull request comment (at most 65,536 characters)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the review to FILE instead of stdout")
    return parser


def main(argv: list[str], stack_name: re.Pattern[str], root: Path = PROJECT_ROOT) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except argparse.ArgumentError as error:
        print(f"gpuhosts diff: {error}", file=sys.stderr)
        return EXIT_INVALID
    except SystemExit as stop:
        return EXIT_NO_CHANGE if stop.code == 0 else EXIT_INVALID
    bad = [s for s in args.items if not stack_name.match(s)] if args.base is not None else []
    if bad or (args.base is None and len(args.items) != 2):
        print("gpuhosts diff: " + (f"{bad[0]!r} is not a stack name (letters, digits, '-', '_', '.'); with --base "
                                   "give stack names, e.g. `gpuhosts diff kpro5 trainer --base origin/main`" if bad
                                   else f"give two plan folders (BASE_PLAN HEAD_PLAN), not {len(args.items)}; or "
                                   "stack names with --base GIT_REF"), file=sys.stderr)
        return EXIT_INVALID
    try:
        if args.base is not None:
            reviews = review_from_git(root, args.items, args.base)
        else:
            base, head = (load_plan(Path(item)) for item in args.items)
            stack = _read_json(Path(args.items[1]) / "summary.json").get("stack") or Path(args.items[1]).name
            reviews = [review_stack(str(stack), base, head)]
    except DiffError as error:
        print(f"gpuhosts diff: {error}", file=sys.stderr)
        return EXIT_ERROR
    text = render_markdown(reviews) if args.markdown else render_text(reviews)
    if args.out is not None:
        try:
            args.out.write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"gpuhosts diff: --out {args.out}: {error.strerror}; give a writable file", file=sys.stderr)
            return EXIT_ERROR
        print(f"review written to {args.out}")
    else:
        sys.stdout.write(text)
    return EXIT_CHANGES if any(r.has_changes for r in reviews) else EXIT_NO_CHANGE
