"""gpuhosts: the stack's desired GPU hosts. The logic lives in gpuhosts/plans/ (pure) and components/ (Pulumi resources); this file only wires config to them.

A stack declares either a Proxmox VE host (`gpuhosts:host` …), several of them (`gpuhosts:hosts`), or a training node
(`gpuhosts:node`, `gpuhosts:training`).
"""

import pulumi

from gpuhosts.config import NAMESPACE, SECTIONS, ConfigError, StackKind, stack_kind
from gpuhosts.services import referenced_secrets
from gpuhosts.stacks import require_locks
from gpuhosts.training import TRAINER_SECTIONS, referenced_training_secrets

settings = pulumi.Config()


def stack_config_keys() -> set[str]:
    """Every key the stack's config holds, in any namespace: the language host hands the program all of them."""
    from pulumi.runtime import config as runtime_config

    return set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())


def gpuhosts_values(keys: set[str]) -> dict:
    """Every gpuhosts:* key, known or not, so that one validation refuses a stray one; secrets by name only."""
    values = {}
    for key in sorted(keys):
        namespace, _, name = key.partition(":")
        if namespace == NAMESPACE:
            values[name] = "[secret]" if pulumi.runtime.is_config_secret(key) else config_value(name)
    return values


def config_value(name: str):
    # Objects and lists arrive as JSON text, scalars as plain text.
    try:
        return settings.get_object(name)
    except (ValueError, pulumi.ConfigTypeError):
        return settings.get(name)


def secret_keys_among(names: set[str]) -> set[str]:
    # Only keys set with `pulumi config set --secret` count: a plain value would sit unencrypted in the stack file.
    return {name for name in names if pulumi.runtime.is_config_secret(f"{NAMESPACE}:{name}")}


def validated(validate, raw, secret_keys, other_keys):
    try:
        return validate(raw, secret_keys, other_keys)
    except ConfigError as error:
        # A RunError is shown as the message alone, without a Python traceback, before any resource exists.
        raise pulumi.RunError(str(error)) from None


keys = stack_config_keys()
others = sorted(key for key in keys if not key.startswith(f"{NAMESPACE}:"))
everything = gpuhosts_values(keys)

if validated(lambda raw, _secrets, _others: stack_kind(raw), everything, set(), others) is StackKind.TRAINER:
    from components.training_node import TrainingNode
    from gpuhosts.stacks import validate_trainer_stack

    raw = {**{key: None for key in TRAINER_SECTIONS}, **everything}
    secret_keys = secret_keys_among(set(everything) | {"sshPrivateKey"} | referenced_training_secrets(raw["training"]))
    # An environment without its committed lock is refused here too, naming the field, as the plan does.
    trainer = validated(lambda *args: require_locks(validate_trainer_stack(*args)), raw, secret_keys, others)
    for warning in trainer.warnings:
        pulumi.log.warn(warning)
    secrets = {name: settings.require_secret(name) for name in sorted(secret_keys)}
    node = TrainingNode(trainer, secrets)
    pulumi.export("desired", {"training": node.summary})
elif everything.get("hosts") is not None:
    from components.proxmox_host import ProxmoxHost
    from gpuhosts.fleet import FLEET_SECTIONS, referenced_fleet_secrets, validate_fleet
    from gpuhosts.plans.proxmox_host import summarize_host

    raw = {**{key: None for key in FLEET_SECTIONS}, **everything}
    secret_keys = secret_keys_among(set(everything) | {"sshPrivateKey"} | referenced_fleet_secrets(raw["hosts"]))
    fleet = validated(validate_fleet, raw, secret_keys, others)
    for warning in fleet.warnings():
        pulumi.log.warn(warning)
    secrets = {name: settings.require_secret(name) for name in sorted(secret_keys)}
    # Each host is a tree of its own, its names prefixed with its own; the outputs are keyed by host.
    hosts = {entry.name: (entry, ProxmoxHost(entry.config, secrets, prefix=entry.prefix,
                                             adopt_one_host=entry.migrated_from_host))
             for entry in fleet.hosts}
    pulumi.export("rebootRequired", {name: host.reboot_required for name, (_, host) in hosts.items()})
    pulumi.export("desired", {name: summarize_host(entry.config) for name, (entry, _) in hosts.items()})
    pulumi.export("services", {name: host.service_outputs for name, (_, host) in hosts.items()})
    pulumi.export("benchmarks", {name: host.benchmark_outputs for name, (_, host) in hosts.items()})
else:
    from components.proxmox_host import ProxmoxHost
    from gpuhosts.benchmarks import referenced_benchmark_secrets
    from gpuhosts.plans.proxmox_host import summarize_host
    from gpuhosts.stacks import validate_stack

    raw = {**{key: None for key in SECTIONS}, **everything}
    secret_keys = secret_keys_among(set(everything) | {"sshPrivateKey"} | referenced_secrets(raw["services"])
                                    | referenced_benchmark_secrets(raw["benchmarks"]))
    config = validated(lambda *args: require_locks(validate_stack(*args)), raw, secret_keys, others)
    for warning in config.warnings():
        pulumi.log.warn(warning)
    secrets = {name: settings.require_secret(name) for name in sorted(secret_keys)}
    host = ProxmoxHost(config, secrets)
    pulumi.export("rebootRequired", host.reboot_required)
    pulumi.export("desired", summarize_host(config))
    pulumi.export("services", host.service_outputs)
    pulumi.export("benchmarks", host.benchmark_outputs)
