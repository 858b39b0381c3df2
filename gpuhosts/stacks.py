"""A stack file's values, validated as a whole: each section typed on its own, then the rules across sections, the
compatibility rules and the release facts of gpuhosts.compat, so one run names every problem. This module sits
above config, services, training and compat; none of them imports it."""

from __future__ import annotations

from typing import Any

from gpuhosts.benchmarks import (
    benchmark_problems,
    benchmark_warnings,
    referenced_benchmark_secrets,
    validate_benchmark_entries,
)
from gpuhosts.compat import Severity, check_services, check_training, model_facts
from gpuhosts.config import (
    NAMESPACE,
    SECRET_KEYS,
    SECTIONS,
    ConfigError,
    ContainerConfig,
    GpuConfig,
    HostConfig,
    MonitoringSpec,
    NvidiaConfig,
    Problem,
    StackConfig,
    StackKind,
    _Model,
    _cross_field_problems,
    _validate_at,
    kind_problems,
    namespace_problems,
    ssh_placeholders,
    ssh_problems,
    stray_key_problems,
    validate_entries,
)
from gpuhosts.engines import driver_for, service_problems
from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.fields import placeholder_digest, placeholder_url
from gpuhosts.locks import lock_problem, lock_spec
from gpuhosts.render import PROJECT_ROOT
from gpuhosts.services import ServiceConfig, _service_problems, referenced_secrets, validate_service_entries
from gpuhosts.training import (
    FLASK_VERSION,
    TRAINER_SECRET_KEYS,
    TRAINER_SECTIONS,
    NodeConfig,
    MultiNodeConfig,
    TrainerStack,
    TrainingConfig,
    _training_problems,
    length_warnings,
    mix_warnings,
    drafter_config_problems,
    referenced_training_secrets,
)


# The sections only one kind of stack has (kind and monitoring are both kinds').
KIND_SECTIONS = {StackKind.PROXMOX: ("host", "nvidia", "gpus", "containers", "services", "benchmarks", "hosts"),
                 StackKind.TRAINER: ("node", "training", "multiNode")}


def kind_of_the_sections(raw: dict[str, Any], kind: StackKind) -> None:
    """A file whose sections are all another kind's, validated as `kind` because gpuhosts:kind says so: one problem,
    on gpuhosts:kind, instead of a required section of this kind missing and each of the other kind's unknown."""
    present = {other: [s for s in sections if raw.get(s) is not None] for other, sections in KIND_SECTIONS.items()}
    (other,) = [k for k in KIND_SECTIONS if k is not kind]
    if present[other] and not present[kind]:
        raise ConfigError([Problem(path=f"{NAMESPACE}:kind", message=(
            f"is {kind.value}, but the file's sections ({', '.join(present[other])}) are a "
            f"{'training node' if other is StackKind.TRAINER else 'Proxmox host'}'s: set {NAMESPACE}:kind: "
            f"{other.value}"))])


def validate_stack(raw: dict[str, Any], secret_keys: set[str] | frozenset[str] = frozenset(),
                   other_keys=()) -> StackConfig:
    """Turn the stack's `gpuhosts:*` values (namespace stripped) into a StackConfig, or raise ConfigError.

    Each section and each list entry is validated on its own, so one run reports every problem in the stack.
    `secret_keys` are the keys set as secrets (`pulumi config set --secret`); services may only name those.
    """
    kind_of_the_sections(raw, StackKind.PROXMOX)
    problems = namespace_problems(other_keys) + kind_problems(raw, StackKind.PROXMOX)
    problems += stray_key_problems(raw, SECTIONS, SECRET_KEYS,
                                   referenced_secrets(raw.get("services")) | referenced_benchmark_secrets(raw.get("benchmarks")),
                                   secret_keys,
                                   "is not a gpuhosts setting")

    def section(model: type[_Model], key: str) -> Any:
        if raw.get(key) is None:
            problems.append(Problem(path=f"{NAMESPACE}:{key}", message="is required"))
            return None
        return _validate_at(model, raw[key], (key,), problems)

    def entries(model: type[_Model], key: str) -> list[tuple[int, Any]]:
        return validate_entries(model, raw.get(key) or [], key, problems)

    host = section(HostConfig, "host")
    nvidia = _validate_at(NvidiaConfig, raw["nvidia"], ("nvidia",), problems) if raw.get("nvidia") is not None else None
    gpus = entries(GpuConfig, "gpus")
    containers = entries(ContainerConfig, "containers")
    services = validate_service_entries(raw.get("services"), problems)
    problems += [Problem(path=f"{NAMESPACE}:services[{index}].{field}", message=why)
                 for index, service in services for field, why in service_problems(service)]
    benchmarks = validate_benchmark_entries(raw.get("benchmarks"), problems)
    if not raw.get("gpus"):
        problems.append(Problem(path=f"{NAMESPACE}:gpus", message="declares no GPU; list the host's GPUs with their `use`"))
    problems += _cross_field_problems(host, nvidia, raw.get("nvidia") is not None, gpus, containers)
    monitoring = monitoring_section(raw, problems)
    if problems:
        raise ConfigError(problems)
    stack = StackConfig(host=host, nvidia=nvidia, gpus=tuple(g for _, g in gpus), containers=tuple(c for _, c in containers),
                        monitoring=monitoring)
    if not services and not benchmarks:
        return stack
    service_warnings = check_stack_services(services, stack, set(secret_keys), problems) if services else []
    problems += benchmark_problems(benchmarks, tuple(s for _, s in services), {c.vmid for c in stack.containers},
                                   set(secret_keys), PROJECT_ROOT)
    if problems:
        raise ConfigError(problems)
    service_warnings += benchmark_warnings(benchmarks, tuple(s for _, s in services), PROJECT_ROOT)
    return stack.model_copy(update={"services": tuple(s for _, s in services), "service_warnings": tuple(service_warnings),
                                    "benchmarks": tuple(b for _, b in benchmarks)})


def check_stack_services(services: list[tuple[int, ServiceConfig]], stack: StackConfig, secret_keys: set[str],
                         problems: list[Problem]) -> list[str]:
    """Rules across services and against the stack, then the compatibility rules: errors are appended to
    `problems`, warnings returned."""
    problems += _service_problems(services, stack, secret_keys)
    found = []
    for finding in check_services([s for _, s in services], positions=[i for i, _ in services]):
        text = f"{finding.message} — {finding.reason} Fix: {finding.fix} [rule {finding.rule}; {finding.source}]"
        if finding.severity is Severity.ERROR:
            problems.append(Problem(path=finding.path, message=text))
        else:
            found.append(f"{finding.path}: {text}")
    return found


def validate_trainer_stack(raw: dict[str, Any], secret_keys: set[str] | frozenset[str] = frozenset(),
                           other_keys=(), drafter_configs: dict[str, dict[str, Any]] | None = None) -> TrainerStack:
    """Turn a training node stack's values into a TrainerStack, or raise ConfigError naming every problem.
    `drafter_configs` maps a drafter repo to its config.json, where known: the stack's mask token, layer types and
    sliding window must then agree with it (without it, the node checks them after the download)."""
    kind_of_the_sections(raw, StackKind.TRAINER)
    problems = namespace_problems(other_keys) + kind_problems(raw, StackKind.TRAINER)
    problems += stray_key_problems(raw, TRAINER_SECTIONS, TRAINER_SECRET_KEYS,
                                  referenced_training_secrets(raw.get("training")), secret_keys,
                                  "is not a setting of a training node stack")
    node = training = None
    for key, model in (("node", NodeConfig), ("training", TrainingConfig)):
        if raw.get(key) is None:
            problems.append(Problem(path=f"{NAMESPACE}:{key}", message="is required"))
        else:
            value = _validate_at(model, raw[key], (key,), problems)
            node, training = (value, training) if key == "node" else (node, value)
    if node is not None:
        problems += ssh_problems("node", node.ssh)
    monitoring = monitoring_section(raw, problems)
    multi_node = None
    if raw.get("multiNode") is not None:
        multi_node = _validate_at(MultiNodeConfig, raw["multiNode"], ("multiNode",), problems)
    if node is not None and training is not None and multi_node is not None:
        problems += multi_node_problems(node, training, multi_node)
    if node is not None and training is not None:
        problems += _training_problems(node, training, set(secret_keys))
        config = (drafter_configs or {}).get(training.drafter.repo)
        if config is not None:
            problems += drafter_config_problems(training, config)
    if problems:
        raise ConfigError(problems)
    warnings = []
    for finding in check_training(training):
        text = f"{finding.message} — {finding.reason} Fix: {finding.fix} [rule {finding.rule}; {finding.source}]"
        if finding.severity.value == "error":
            problems.append(Problem(path=finding.path, message=text))
        else:
            warnings.append(f"{finding.path}: {text}")
    if problems:
        raise ConfigError(problems)
    if node.ssh.insecure_ignore_host_key:
        warnings.append(f"{NAMESPACE}:node.ssh.insecureIgnoreHostKey is true: the node's identity is not checked")
    warnings += ssh_placeholders("node", node.ssh)
    if training.dataset.source is not None and placeholder_url(training.dataset.source):
        warnings.append(f"{NAMESPACE}:training.dataset.source {training.dataset.source} is on a placeholder domain; "
                        "put in where the tokenized data set is served, and its manifestSha256")
    if training.dataset.manifest_sha256 is not None and placeholder_digest(training.dataset.manifest_sha256):
        warnings.append(f"{NAMESPACE}:training.dataset.manifestSha256 is a placeholder; put in `sha256sum SHA256SUMS`")
    warnings += mix_warnings(training.dataset)
    warnings += length_warnings(training)
    for field, spec in (("training.verifier", training.verifier), ("training.drafter", training.drafter)):
        if model_facts(spec.repo).num_layers is None and spec.num_layers is None:
            warnings.append(f"{NAMESPACE}:{field}.repo {spec.repo} is not in the known-models table: its layer count "
                            "is not checked after the download (give numLayers to check it)")
    return TrainerStack(node=node, training=training, warnings=tuple(warnings), multi_node=multi_node,
                        monitoring=monitoring)


def monitoring_section(raw: dict[str, Any], problems: list[Problem]) -> MonitoringSpec | None:
    """`gpuhosts:monitoring`, typed; absent (or null), nothing of it is installed. `{}` is every default:
    exporters on loopback."""
    if raw.get("monitoring") is None:
        return None
    return _validate_at(MonitoringSpec, raw["monitoring"], ("monitoring",), problems)


def multi_node_problems(node: NodeConfig, training: TrainingConfig, multi: MultiNodeConfig) -> list[Problem]:
    """Every node of a multi-node run is another machine with the GPUs the run places on it: torchrun starts
    trainingGpus' workers on each, and each serves its own hidden states on server.gpus."""
    problems: list[Problem] = []
    names = {node.name: "gpuhosts:node"}
    targets = {(node.ssh.host.lower(), node.ssh.port): "gpuhosts:node"}
    used = max((*training.server.gpus, *training.training_gpus), default=0)
    for index, other in enumerate(multi.nodes):
        at = f"{NAMESPACE}:multiNode.nodes[{index}]"
        if other.name in names:
            problems.append(Problem(path=f"{at}.name", message=f"{other.name} is already {names[other.name]}'s name; "
                                                               "each node is named once"))
        names.setdefault(other.name, f"multiNode.nodes[{index}]")
        target = (other.ssh.host.lower(), other.ssh.port)
        if target in targets:
            problems.append(Problem(path=f"{at}.ssh.host", message=(
                f"{other.ssh.host}:{other.ssh.port} is already {targets[target]}'s SSH server; a node of the run is a "
                "machine of its own")))
        targets.setdefault(target, f"multiNode.nodes[{index}]")
        problems += ssh_problems(f"multiNode.nodes[{index}]", other.ssh)
        if other.gpus.count <= used:
            problems.append(Problem(path=f"{at}.gpus.count", message=(
                f"is {other.gpus.count}, but the run places GPU {used} on every node (training.server.gpus and "
                "training.trainingGpus); give the node's real count, or place the run on fewer GPUs")))
        if other.driver_version != node.driver_version:
            problems.append(Problem(path=f"{at}.driverVersion", message=(
                f"{other.driver_version} differs from gpuhosts:node.driverVersion {node.driver_version}; the nodes of "
                "one run use one CUDA user space, so one driver: set it equal")))
    return problems


def service_lock_problems(services) -> list[Problem]:
    """Each service whose engine environment (the base release of a git-ref build) has no committed lock; an
    engine its driver installs without one has none to miss."""
    found = []
    for index, service in services:
        lock = driver_for(service.engine).install(service).lock
        problem = lock and lock_problem(lock, f"services[{index}].engine.version", f"services[{index}].python")
        if problem:
            found.append(problem)
    return found


def training_lock_problems(training) -> list[Problem]:
    """The trainer's speculators, hidden-state vLLM and monitor environments without a committed lock."""
    wanted = [(f"speculators=={training.speculators.version}", "training.speculators.version"),
              (f"vllm=={training.vllm.version}", "training.vllm.version"),
              (f"flask=={FLASK_VERSION}", "training.python")]
    problems = [lock_problem(lock_spec(requirement, training.python), path, "training.python")
                for requirement, path in wanted]
    return [p for p in problems if p]


def require_locks(stack):
    """`stack` (a validated StackConfig or TrainerStack), or ConfigError naming each field whose environment has no
    committed lock, or whose code from a repository no commit pins — before any unit is planned."""
    if hasattr(stack, "training"):
        problems = training_lock_problems(stack.training)
        if not problems:
            # what the node runs from speculators' repository is pinned as its environment is: by content
            problems = [Problem(path=f"{NAMESPACE}:{field}", message=message)
                        for field, message in speculators_driver.scripts_problems(stack.training.speculators,
                                                                                  "training.speculators")]
    else:
        problems = service_lock_problems(list(enumerate(stack.services)))
    if problems:
        raise ConfigError(problems)
    return stack
