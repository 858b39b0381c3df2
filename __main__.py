"""gpuhosts: the stack's desired GPU hosts. The logic lives in components/; this file only wires config to them."""

import pulumi

from components.proxmox_host import ProxmoxHost, summarize_host
from gpuhosts.config import NAMESPACE, SECTIONS, ConfigError, validate_stack
from gpuhosts.services import referenced_secrets

settings = pulumi.Config()
raw = {key: settings.get_object(key) for key in SECTIONS}
# Only keys set with `pulumi config set --secret` count: a plain value would sit unencrypted in the stack file.
named_secrets = {"sshPrivateKey"} | referenced_secrets(raw["services"])
secret_keys = {name for name in named_secrets if pulumi.runtime.is_config_secret(f"{NAMESPACE}:{name}")}
try:
    config = validate_stack(raw, secret_keys)
except ConfigError as error:
    # A RunError is shown as the message alone, without a Python traceback, before any resource exists.
    raise pulumi.RunError(str(error)) from None
for warning in config.warnings():
    pulumi.log.warn(warning)

secrets = {name: settings.require_secret(name) for name in sorted(secret_keys)}
host = ProxmoxHost(config, settings.require_secret("sshPrivateKey"), secrets)

pulumi.export("rebootRequired", host.reboot_required)
pulumi.export("desired", summarize_host(config))
pulumi.export("services", host.service_outputs)
