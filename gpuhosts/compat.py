"""Compatibility rules of engines, models and drafters, as data (gpuhosts/compat-rules.yaml), checked at plan time.

A rule row names a `check` (one of CHECKS below) and its `params`; a check returns the services it hits, with a
detail. Each hit becomes a Finding carrying the rule's severity, the field path, the reason, the fix and the
source, so a stack author learns in one plan what the engines would otherwise teach over days.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from gpuhosts.compat_data import (
    RULES_FILE,
    EngineFacts,
    ModelFacts,
    RuleFile,
    Severity,
    engine_facts,
    load_rule_file,
    model_facts,
    version_key,
)
from gpuhosts.config import NAMESPACE
from gpuhosts.engines import driver_for
from gpuhosts.fields import binds_meet
from gpuhosts.hostside.drafter_config import DrafterFacts, check_drafter, parse_drafter_config
from gpuhosts.services import ServiceConfig, SpecMethod

__all__ = ["RULES_FILE", "EngineFacts", "Finding", "ModelFacts", "RuleFile", "Severity", "check_services",
           "check_training", "engine_facts", "errors", "load_rules", "model_facts", "version_key", "warnings"]


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    path: str
    message: str
    reason: str
    fix: str
    source: str

    def __str__(self) -> str:
        return (f"{self.severity.value}: {self.path}: {self.message} — {self.reason} Fix: {self.fix} "
                f"[rule {self.rule}; {self.source}]")



def load_rules(path: Path = RULES_FILE) -> RuleFile:
    """The rule file, with every row's check known (a typo in a check name is an error naming it)."""
    rules = load_rule_file(path)
    for section, known in (("rules", CHECKS), ("trainingRules", TRAINING_CHECKS)):
        for row in getattr(rules, "rules" if section == "rules" else "training_rules"):
            if row.check not in known:
                raise ValueError(f"{path}: {section} row {row.id}: unknown check {row.check!r}; known: "
                                 f"{', '.join(sorted(known))}")
    return rules


@dataclass
class Context:
    services: list[tuple[int, ServiceConfig]]
    rules: RuleFile
    drafter_configs: dict[str, dict[str, Any]]

    def facts(self, repo: str) -> ModelFacts:
        return model_facts(repo, self.rules)


Hit = tuple[int, str]  # (service index, detail)


def _engine_min_version(params: dict, ctx: Context) -> list[Hit]:
    hits = []
    for index, service in ctx.services:
        if service.engine.name != params["engine"] or ctx.facts(service.model.repo).family != params["family"]:
            continue
        if version_key(service.engine.version) < version_key(params["minVersion"]):
            hits.append((index, f"{params['engine']} {service.engine.version} with {service.model.repo} "
                                f"(needs ≥ {params['minVersion']})"))
    return hits


def _engine_release(params: dict, ctx: Context) -> list[Hit]:
    """A release of an engine that cannot serve at all (it does not install, or breaks every model)."""
    hits = []
    for index, service in ctx.services:
        if (service.engine.name == params["engine"] and service.engine.git_ref is None
                and Version(service.engine.version) in SpecifierSet(params["versions"])):
            hits.append((index, f"{params['engine']} {service.engine.version} cannot serve here"))
    return hits


def _spec_on_gdn_hybrid(params: dict, ctx: Context) -> list[Hit]:
    hits = []
    for index, service in ctx.services:
        if (service.engine.name != params["engine"] or service.speculative.method is SpecMethod.NONE
                or not ctx.facts(service.model.repo).gdn_hybrid):
            continue
        driver = driver_for(service.engine)
        release = driver.facts(service.engine)
        argv = driver.argv(service, driver.install(service))
        env = driver.environment(service) | dict(service.environment)
        missing = []
        flag = release.flag(params["flag"])
        values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag] + \
                 [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]
        if not values or values[-1] != params["value"]:
            missing.append(f"{flag} {params['value']} (have {values[-1] if values else 'none'})")
        for key, value in params.get("environment", {}).items():
            # A release whose default already is the value needs the variable only not to be overridden.
            if env.get(key, value if key in release.redundant_environment else None) != value:
                missing.append(f"{key}={value} (have {env.get(key, 'unset')})")
        if service.speculative.eagle_topk > params["maxTopk"]:
            missing.append(f"eagleTopk ≤ {params['maxTopk']} (have {service.speculative.eagle_topk})")
        if missing:
            hits.append((index, f"speculative {service.speculative.method.value} on GDN-hybrid {service.model.repo} "
                                f"lacks " + ", ".join(missing)))
    return hits


def _fix_present(params: dict, ctx: Context) -> list[Hit]:
    hits = []
    for index, service in ctx.services:
        if service.engine.name != params["engine"] or service.speculative.method.value not in params["methods"]:
            continue
        engine = service.engine
        if driver_for(engine).contains(engine, params["pr"]):
            continue
        build = engine.version + (f" + {engine.git_ref}" if engine.git_ref else "")
        hits.append((index, f"{engine.name} {build} is not known to contain PR {params['pr']}"))
    return hits


def _swa_drafter(params: dict, ctx: Context) -> list[Hit]:
    hits = []
    for index, service in ctx.services:
        drafter = service.speculative.drafter
        if service.engine.name != params["engine"] or drafter is None:
            continue
        sliding = drafter.sliding_window
        if drafter.repo in ctx.drafter_configs:
            sliding = parse_drafter_config(ctx.drafter_configs[drafter.repo]).has_sliding_window
        if sliding is None:
            sliding = ctx.facts(drafter.repo).sliding_window
        if not sliding:
            continue
        engine = service.engine
        driver = driver_for(engine)
        if driver.contains(engine, params["buildPr"]):
            continue
        has_fixes = all(driver.contains(engine, pr) for pr in params["replacementPrs"])
        release = driver.facts(engine)
        env = driver.environment(service) | dict(service.environment)
        env_ok = all(env.get(k, v if k in release.redundant_environment else None) == v
                     for k, v in params["environment"].items())
        if has_fixes and env_ok:
            continue
        wanted = ", ".join(f"{k}={v}" for k, v in params["environment"].items())
        why = (f"{engine.name} {engine.version} has neither PR {params['buildPr']} nor PR "
               f"{' and '.join(map(str, params['replacementPrs']))}") if not has_fixes else \
            f"{engine.name} {engine.version} has the replacement fix but runs without {wanted}"
        hits.append((index, f"drafter {drafter.repo} has sliding-window layers; {why}"))
    return hits


def _drafter_target_layer_ids(params: dict, ctx: Context) -> list[Hit]:
    hits = []
    for index, service in ctx.services:
        drafter = service.speculative.drafter
        if drafter is None or service.speculative.method is not SpecMethod.DFLASH:
            continue
        target_layers = service.model.num_layers or ctx.facts(service.model.repo).num_layers
        config = ctx.drafter_configs.get(drafter.repo)
        facts = parse_drafter_config(config) if config else DrafterFacts(None, None, None, None)
        if target_layers is None or (facts.target_layer_ids is None and drafter.target_layer_ids is None):
            continue
        result = check_drafter(target_layers, facts, declared=drafter.target_layer_ids,
                               num_draft_layers=drafter.num_layers or ctx.facts(drafter.repo).num_layers)
        if not result.ok:
            hits.append((index, f"drafter {drafter.repo}: " + "; ".join(result.problems)))
    return hits


def _instances(ctx: Context) -> list[tuple[int, ServiceConfig]]:
    """Each service's engine copies (its replicas, or itself), with the service's index."""
    return [(index, instance) for index, service in ctx.services for instance in service.instances]


def _tensor_parallel_within_gpus(params: dict, ctx: Context) -> list[Hit]:
    return [(index, f"tensorParallelSize {s.tensor_parallel_size} with {len(s.gpus)} GPU(s) listed"
             + (f" for replica {s.name}" if s.family != s.name else ""))
            for index, s in _instances(ctx) if s.gpus and s.tensor_parallel_size > len(s.gpus)]


def _pairs(ctx: Context, overlap: Callable[[ServiceConfig, ServiceConfig], str | None]) -> list[Hit]:
    hits = []
    instances = _instances(ctx)
    for position, (index, service) in enumerate(instances):
        for other_index, other in instances[:position]:
            # Replicas of one service are held apart by the service's own rules (gpuhosts.services).
            if other.container != service.container or other.family == service.family:
                continue
            what = overlap(service, other)
            if what is None:
                continue
            declared = other.family in service.shares_with or service.family in other.shares_with
            if not declared:
                hits.append((index, f"{what} as services[{other_index}] ({other.name}) without sharesWith"))
            elif service.enabled and other.enabled:
                hits.append((index, f"{what} as services[{other_index}] ({other.name}) and both are enabled"))
    return hits


def _shared_port(params: dict, ctx: Context) -> list[Hit]:
    def overlap(a: ServiceConfig, b: ServiceConfig) -> str | None:
        return f"port {a.port} is the same" if a.port == b.port and binds_meet(a.bind, b.bind) else None
    return _pairs(ctx, overlap)


def _shared_gpus(params: dict, ctx: Context) -> list[Hit]:
    def overlap(a: ServiceConfig, b: ServiceConfig) -> str | None:
        common = sorted(set(a.gpus) & set(b.gpus))
        return f"GPUs {', '.join(common)} are the same" if common else None
    return _pairs(ctx, overlap)


def _context_beyond_the_model(params: dict, ctx: Context) -> list[Hit]:
    hits = []
    for index, service in ctx.services:
        limit = ctx.facts(service.model.repo).max_position_embeddings
        if service.context_length and limit and service.context_length > limit:
            hits.append((index, f"contextLength {service.context_length} is beyond {service.model.repo}'s "
                         f"max_position_embeddings {limit}"))
    return hits


def _derived_flag_in_extra_args(params: dict, ctx: Context) -> list[Hit]:
    """The flags a service's driver puts on its command line for its release, from the driver itself: a flag a
    driver starts deriving is refused in extraArgs with no new rule."""
    hits = []
    for index, service in ctx.services:
        if not service.extra_args:
            continue
        driver = driver_for(service.engine)
        argv = driver.argv(service, driver.install(service))
        derived = {word.split("=", 1)[0] for word in argv[:len(argv) - len(service.extra_args)] if word.startswith("-")}
        for position, word in enumerate(service.extra_args):
            if word.startswith("-") and word.split("=", 1)[0] in derived:
                hits.append((index, f"extraArgs[{position}] is {word.split('=', 1)[0]}, which gpuhosts derives for "
                             f"{driver.name} {service.engine.version}"))
    return hits


CHECKS: dict[str, Callable[[dict, Context], list[Hit]]] = {
    "engine_min_version": _engine_min_version,
    "engine_release": _engine_release,
    "spec_on_gdn_hybrid": _spec_on_gdn_hybrid,
    "fix_present": _fix_present,
    "swa_drafter": _swa_drafter,
    "drafter_target_layer_ids": _drafter_target_layer_ids,
    "tensor_parallel_within_gpus": _tensor_parallel_within_gpus,
    "shared_port": _shared_port,
    "shared_gpus": _shared_gpus,
    "derived_flag_in_extra_args": _derived_flag_in_extra_args,
    "context_beyond_the_model": _context_beyond_the_model,
}


def check_services(services: tuple[ServiceConfig, ...] | list[ServiceConfig], *,
                   drafter_configs: dict[str, dict[str, Any]] | None = None,
                   rules: RuleFile | None = None, positions: list[int] | None = None) -> list[Finding]:
    """Every rule against every service; `drafter_configs` maps a drafter repo to its config.json, where known;
    `positions` are the services' indexes in the stack's list, where some entries were invalid and left out."""
    rule_file = rules or load_rules()
    positions = positions if positions is not None else list(range(len(services)))
    ctx = Context(services=list(enumerate(services)), rules=rule_file, drafter_configs=drafter_configs or {})
    findings = []
    for rule in rule_file.rules:
        for index, detail in CHECKS[rule.check](rule.params, ctx):
            findings.append(Finding(rule=rule.id, severity=rule.severity,
                                    path=f"{NAMESPACE}:services[{positions[index]}].{rule.field}", message=detail,
                                    reason=" ".join(rule.reason.split()), fix=" ".join(rule.fix.split()),
                                    source=" ".join(rule.source.split())))
    return findings


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.WARNING]


# --- training node rules ---------------------------------------------------------------------------------------

def _package(training: Any, name: str) -> Any:
    return getattr(training, name)


def _training_fix_present(params: dict, training: Any, rules: RuleFile) -> str | None:
    """The package lacks a fix (a PR) that the verifier needs; `onlyGdnHybrid` limits it to hybrid verifiers."""
    if params.get("onlyGdnHybrid") and not model_facts(training.verifier.repo, rules).gdn_hybrid:
        return None
    package = _package(training, params["package"])
    pr = params["pr"]
    if package.contains(pr) or pr in engine_facts(params["package"], package.version).contains_prs:
        return None
    if "knownIn" in params and version_key(package.version) >= version_key(params["knownIn"]):
        return None
    return f"{params['package']} {package.version}{' + ' + package.git_ref if package.git_ref else ''} is not known " \
           f"to contain PR {pr}"


def _training_min_version(params: dict, training: Any, rules: RuleFile) -> str | None:
    package = _package(training, params["package"])
    if version_key(package.version) >= version_key(params["minVersion"]):
        return None
    return f"{params['package']} {package.version} is older than {params['minVersion']}"


def _training_context_beyond_the_model(params: dict, training: Any, rules: RuleFile) -> str | None:
    limit = model_facts(training.verifier.repo, rules).max_position_embeddings
    length = training.server.max_model_len
    if limit and length > limit:
        return f"maxModelLen {length} is beyond {training.verifier.repo}'s max_position_embeddings {limit}"
    return None


TRAINING_CHECKS: dict[str, Callable[[dict, Any, RuleFile], str | None]] = {
    "training_context_beyond_the_model": _training_context_beyond_the_model,
    "training_fix_present": _training_fix_present,
    "training_min_version": _training_min_version,
}


def check_training(training: Any, rules: RuleFile | None = None) -> list[Finding]:
    """Every training rule against a training node's settings (gpuhosts.training.TrainingConfig)."""
    rule_file = rules or load_rules()
    findings = []
    for rule in rule_file.training_rules:
        detail = TRAINING_CHECKS[rule.check](rule.params, training, rule_file)
        if detail is not None:
            findings.append(Finding(rule=rule.id, severity=rule.severity, path=f"{NAMESPACE}:training.{rule.field}",
                                    message=detail, reason=" ".join(rule.reason.split()), fix=" ".join(rule.fix.split()),
                                    source=" ".join(rule.source.split())))
    return findings
