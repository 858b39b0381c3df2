"""gpuhosts: the stack's desired GPU hosts. The logic lives in components/; this file only wires config to them.

A stack declares either a Proxmox VE host (`gpuhosts:host` …) or a training node (`gpuhosts:node`, `gpuhosts:training`).
"""

import pulumi

from gpuhosts.config import NAMESPACE, SECTIONS, ConfigError
from gpuhosts.services import referenced_secrets
from gpuhosts.training import TRAINER_SECTIONS, referenced_training_secrets

settings = pulumi.Config()


def secret_keys_among(names: set[str]) -> set[str]:
    # Only keys set with `pulumi config set --secret` count: a plain value would sit unencrypted in the stack file.
    return {name for name in names if pulumi.runtime.is_config_secret(f"{NAMESPACE}:{name}")}


def validated(validate, raw, secret_keys):
    try:
        return validate(raw, secret_keys)
    except ConfigError as error:
        # A RunError is shown as the message alone, without a Python traceback, before any resource exists.
        raise pulumi.RunError(str(error)) from None


if settings.get_object("node") is not None or settings.get_object("training") is not None:
    from components.training_node import TrainingNode
    from gpuhosts.training import validate_trainer_stack

    raw = {key: settings.get_object(key) for key in TRAINER_SECTIONS}
    secret_keys = secret_keys_among({"sshPrivateKey"} | referenced_training_secrets(raw["training"]))
    trainer = validated(validate_trainer_stack, raw, secret_keys)
    for warning in trainer.warnings:
        pulumi.log.warn(warning)
    secrets = {name: settings.require_secret(name) for name in sorted(secret_keys)}
    node = TrainingNode(trainer, secrets)
    pulumi.export("desired", {"training": node.summary})
else:
    from components.proxmox_host import ProxmoxHost, summarize_host
    from gpuhosts.config import validate_stack

    raw = {key: settings.get_object(key) for key in SECTIONS}
    secret_keys = secret_keys_among({"sshPrivateKey"} | referenced_secrets(raw["services"]))
    config = validated(validate_stack, raw, secret_keys)
    for warning in config.warnings():
        pulumi.log.warn(warning)
    secrets = {name: settings.require_secret(name) for name in sorted(secret_keys)}
    host = ProxmoxHost(config, secrets)
    pulumi.export("rebootRequired", host.reboot_required)
    pulumi.export("desired", summarize_host(config))
    pulumi.export("services", host.service_outputs)
