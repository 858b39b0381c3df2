"""gpuhosts: the stack's desired GPU hosts. The logic lives in components/; this file only wires config to them."""

import pulumi

from components.proxmox_host import ProxmoxHost, summarize_host
from gpuhosts.config import SECTIONS, ConfigError, validate_stack

settings = pulumi.Config()
try:
    config = validate_stack({key: settings.get_object(key) for key in SECTIONS})
except ConfigError as error:
    # A RunError is shown as the message alone, without a Python traceback, before any resource exists.
    raise pulumi.RunError(str(error)) from None
for warning in config.warnings():
    pulumi.log.warn(warning)

host = ProxmoxHost(config, settings.require_secret("sshPrivateKey"))

pulumi.export("rebootRequired", host.reboot_required)
pulumi.export("desired", summarize_host(config))
