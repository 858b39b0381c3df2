"""Typed stack configuration.

Every `gpuhosts:*` key of a stack is validated here, once, before anything touches a host. Field rules live
on the models; rules that span fields live in `_cross_field_problems`, so that each problem can name the exact
config path (`gpuhosts:gpus[2].container`) and say how to fix it.
"""

from __future__ import annotations

import base64
import difflib
import json
import posixpath
import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from gpuhosts.compat_data import driver_kernel_problem, host_row, load_rule_file, model_facts
from gpuhosts.units import OPERATIONS, UNIT_KINDS
from gpuhosts.fields import (
    DNS_NAME,
    USER_NAME,
    control_characters,
    host_address,
    ip_address,
    placeholder_address,
    placeholder_digest,
    placeholder_host_key,
    placeholder_url,
    safe_directory,
)

NAMESPACE = "gpuhosts"
SECTIONS = ("kind", "host", "nvidia", "gpus", "containers", "services", "benchmarks", "monitoring")
# Secret keys gpuhosts itself reads; services may name more (apiKeySecret).
SECRET_KEYS = ("sshPrivateKey", "hfToken")

PCI_ADDRESS = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<slot>[01][0-9a-fA-F])\.(?P<fn>[0-7])$")
DRIVER_VERSION = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The key types a host presents (sshd's HostKey); the sk-… types are FIDO security keys, which hold user keys only.
HOST_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) (?P<data>[A-Za-z0-9+/]+={0,3})$")
KERNEL_ARG = re.compile(r"^[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:+-]+)?$")
HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class Problem(BaseModel):
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(Exception):
    """Raised with every problem found, so a user fixes a stack in one pass."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("invalid stack configuration:\n" + "\n".join(f"  - {p}" for p in problems))


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        # A newline or an escape in any value could end a here-document, a unit line or a message early. Checked
        # after the field's own type, so that a nested setting is named at its own field, not at its section.
        found = control_characters(value)
        if found is not None:
            raise ValueError(f"{found[:60]!r} holds a control character (newline, tab, escape …); remove it")
        return value


class Bootloader(str, Enum):
    SYSTEMD_BOOT = "systemd-boot"
    GRUB = "grub"


class KernelModuleType(str, Enum):
    OPEN = "open"
    PROPRIETARY = "proprietary"


class GpuUse(str, Enum):
    VFIO = "vfio"
    HOST = "host"
    CONTAINER = "container"


class SshConfig(_Model):
    host: str = Field(min_length=1, description="Address or DNS name of the host's SSH server.")
    port: int = Field(22, ge=1, le=65535, description="SSH port.")
    user: str = Field("root", min_length=1, description="Login user; the units install system files and services, "
                                                        "which needs root (on a Proxmox host, so does `pct set --devN`).")

    @field_validator("host")
    @classmethod
    def _address(cls, value: str) -> str:
        return host_address(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not USER_NAME.match(value):
            raise ValueError(f"{value!r} is not a user name (lower-case letters, digits, '_', '-')")
        return value
    host_key: str | None = Field(None, description="The host's public key (`ssh-ed25519 AAAA…`), pinned. Required "
                                                   "unless insecureIgnoreHostKey.")
    insecure_ignore_host_key: bool = Field(False, description="Skip host key checking (warns). Default false.")
    operation_timeouts: dict[str, dict[str, int]] = Field(
        {}, description="Seconds one operation of a unit kind may run before it is ended, per kind and operation "
                        "(`{ModelDownload: {ensure: 86400}}`). Defaults per kind: probes 600, ensures and teardowns "
                        "1800, longer for downloads, builds and gates (gpuhosts/units.py KIND_LIMITS_S).")

    @field_validator("operation_timeouts")
    @classmethod
    def _limits(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for kind, limits in value.items():
            if kind not in UNIT_KINDS:
                raise ValueError(f"{kind!r} is no unit kind; use one of {', '.join(sorted(UNIT_KINDS))}")
            for operation, seconds in limits.items():
                if operation not in OPERATIONS:
                    raise ValueError(f"{kind}.{operation}: the operations are {', '.join(OPERATIONS)}")
                if not 10 <= seconds <= 7 * 86400:
                    raise ValueError(f"{kind}.{operation}: {seconds} s; give 10 to 604800 seconds")
        return value

    @field_validator("host_key")
    @classmethod
    def _key_shape(cls, value: str | None) -> str | None:
        if value is None:
            return value
        words = value.strip().split()
        if words and words[0].startswith("sk-"):
            raise ValueError(f"{words[0]} is a security-key (FIDO) type, which only user keys have; put in the host's "
                             "own key: `ssh-keyscan -t ed25519 ADDRESS`")
        match = HOST_KEY.match(value.strip())
        if not match or not _key_blob_names(match[1], match["data"]):
            raise ValueError(
                "is not an OpenSSH public key line; copy the host's `/etc/ssh/ssh_host_ed25519_key.pub` without the comment"
            )
        return value.strip()


def _key_blob_names(key_type: str, data: str) -> bool:
    """Whether the key's base64 data decodes and begins with its own type (RFC 4253 section 6.6: a string, the key
    format identifier): a pasted type that does not match its data is refused here, not by the SSH library."""
    try:
        blob = base64.b64decode(data, validate=True)
    except ValueError:
        return False
    if len(blob) < 4:
        return False
    length = int.from_bytes(blob[:4], "big")
    return blob[4:4 + length] == key_type.encode()


class HostConfig(_Model):
    name: str = Field(description="Host name, used for resource names and the plan's host folder.")
    ssh: SshConfig = Field(description="How gpuhosts reaches the host over SSH (root, the host key pinned).")
    bootloader: Bootloader = Field(description="`systemd-boot` or `grub` (`proxmox-boot-tool status` tells).")
    kernel_args: tuple[str, ...] = Field(
        ("iommu=pt",),
        description="Kernel arguments for PCI passthrough. Default `iommu=pt`; add `intel_iommu=on` on Intel with kernels < 6.8.",
    )
    allow_reboot: bool = Field(False, description="Reboot the host (and wait) when a change needs it. Default false.")
    proxmox_release: str | None = Field(
        None, pattern=r"^\d+\.\d+$",
        description="The Proxmox VE release the host runs, major.minor as `pveversion` prints it (`9.1`): the plan "
                    "checks the driver against its kernel series, and the driver's ensure refuses a host that runs "
                    "another. Default: not declared, nothing checked.")

    @field_validator("name")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if not HOSTNAME.match(value):
            raise ValueError("must be a lower-case host name (letters, digits, '-'), e.g. kpro5")
        return value

    @field_validator("kernel_args")
    @classmethod
    def _args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            if not KERNEL_ARG.match(arg):
                raise ValueError(f"{arg!r} is not a single kernel argument of the form key or key=value")
        return value


class NvidiaConfig(_Model):
    version: str = Field(description="Exact driver version; drives the host module and every container's user space.")
    kernel_module_type: KernelModuleType = Field(KernelModuleType.OPEN, description="`open` (default) or `proprietary`.")
    sha256: str = Field(description="sha256 of the `.run` installer, checked before it runs.")
    url: str | None = Field(None, description="Where to fetch the `.run`; default NVIDIA's download server.")

    @field_validator("version", mode="before")
    @classmethod
    def _exact(cls, value: Any) -> Any:
        if isinstance(value, (int, float)):
            raise ValueError(
                f"{value!r} is a number; quote it (\"580.126.09\") — YAML reads 550.120 as 550.12 and an exact version needs the text"
            )
        text = str(value)
        if not DRIVER_VERSION.match(text):
            raise ValueError(
                f"{text!r} is not an exact driver version; user space must equal the kernel module exactly, "
                "so pin the full version, e.g. \"580.126.09\" (quoted)"
            )
        return text

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        # What the driver unit's download takes (curl over TLS, or a copy on the host); the sha256 pins the content.
        if value is not None and not value.startswith(("https://", "file:///")):
            raise ValueError(f"{value!r} is neither an https:// URL nor a file:/// path: write the https:// address "
                             "of the .run (or file:///PATH for a copy on the host), or leave url out for NVIDIA's")
        return value

    @field_validator("sha256")
    @classmethod
    def _sha(cls, value: str) -> str:
        if not SHA256.match(value):
            raise ValueError("must be 64 lower-case hex digits: `sha256sum NVIDIA-Linux-x86_64-<version>.run`")
        return value

    @property
    def run_file(self) -> str:
        return f"NVIDIA-Linux-x86_64-{self.version}.run"

    @property
    def download_url(self) -> str:
        return self.url or f"https://download.nvidia.com/XFree86/Linux-x86_64/{self.version}/{self.run_file}"


class GpuConfig(_Model):
    address: str = Field(description="PCI address of the GPU's function 0; `41:00.0` is read as `0000:41:00.0`.")
    model: str = Field(min_length=1, description="Model name, for people reading the plan (`RTX A6000`).")
    use: GpuUse = Field(description="`vfio` (for VMs), `host` (nvidia driver, kept on the host) or `container`.")
    container: int | None = Field(None, description="vmid of the LXC container that receives the GPU (use: container).")

    @field_validator("address", mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        match = PCI_ADDRESS.match(str(value).strip())
        if not match:
            raise ValueError(
                f"{value!r} is not a PCI address; write it as `lspci -D` shows it, e.g. 0000:41:00.0 (or 41:00.0)"
            )
        if match["fn"] != "0":
            raise ValueError(f"{value!r} is function {match['fn']}; give the GPU's function .0 — the slot's other functions follow it")
        return f"{(match['domain'] or '0000')}:{match['bus']}:{match['slot']}.0".lower()

    @property
    def slot(self) -> str:
        return self.address[:-2]


class ModelStore(_Model):
    host_path: str = Field(description="Directory on the host's storage holding model weights (`/tank/models`); "
                                       "created when missing, never deleted.")
    path: str = Field("/srv/models", description="Where it is bind-mounted in the container. Default /srv/models.")

    @field_validator("host_path", "path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return safe_directory(value)


class ContainerConfig(_Model):
    vmid: int = Field(ge=100, le=999_999_999, description="The LXC container's vmid.")
    hostname: str = Field(min_length=1, description="The container's host name (checked, not set).")

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if not DNS_NAME.match(value):
            raise ValueError(f"{value!r} is not a host name (RFC 1123: letters, digits and '-' in dot-separated labels)")
        return value
    allow_restart: bool = Field(
        True, description="Restart the running container when its GPU devices change, so it sees them. Default true."
    )
    model_store: ModelStore | None = Field(
        None, description="Host storage bind-mounted into the container for services with weightsOn: host, so "
                          "weights survive a rebuild of the container. Default none."
    )
    privileged: bool = Field(
        False, description="The container is privileged (`unprivileged: 0` in its config): its root is the host's "
                           "root, so a process that takes the container (an engine, what it downloads) takes the "
                           "host. Declare it to accept that; without it, gpuhosts refuses to give such a container "
                           "GPUs. Default false: the container must be unprivileged."
    )
    profiling_device: bool = Field(
        False, description="Also pass /dev/nvidia-uvm-tools, which CUDA profilers (Nsight Systems, CUPTI) use to "
                           "trace the GPU's memory traffic. Default false: no process in the container traces it."
    )



# The DCGM packages of NVIDIA's CUDA repository the exporter and its metric catalog are pinned to: DCGM 4.5.3
# (datacenter-gpu-manager-4-core 1:4.5.3-1, with its epoch as apt reports it) and dcgm-exporter 4.8.2 (its deb,
# datacenter-gpu-manager-exporter_4.8.2-1_amd64.deb), the pair dcgm-exporter's tag 4.5.3-4.8.2 names.
DCGM_VERSION = "1:4.5.3-1"
DCGM_EXPORTER_VERSION = "4.8.2-1"
DEBIAN_VERSION = re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~]+)?")


class MonitoringSpec(_Model):
    """`gpuhosts:monitoring`: the exporters gpuhosts runs beside a stack and the files it writes for a Prometheus
    (and a Grafana) the user runs: alert rules, scrape targets, dashboards. Absent, none of it is installed."""

    bind: str = Field("127.0.0.1", description="Address the node and DCGM exporters listen on. Default 127.0.0.1: "
                                               "scraped by a Prometheus on the same machine; an address of the "
                                               "network only with intent.")
    node_exporter_port: int = Field(9100, ge=1024, le=65535, description="Port of the node exporter. Default 9100.")
    dcgm_exporter_port: int = Field(9400, ge=1024, le=65535, description="Port of the DCGM exporter. Default 9400.")
    dcgm_version: str = Field(DCGM_VERSION, description="Debian version of datacenter-gpu-manager-4-core that "
                              f"the DCGM exporter runs on, held there: a package moved by hand is drift. Default "
                              f"{DCGM_VERSION} (DCGM 4.5.3, which dcgm-exporter 4.5.3-4.8.2 is built for).")
    dcgm_exporter_version: str = Field(DCGM_EXPORTER_VERSION, description="Debian version of "
                                       "datacenter-gpu-manager-exporter, held there. Default "
                                       f"{DCGM_EXPORTER_VERSION} (dcgm-exporter 4.5.3-4.8.2, whose metric names "
                                       "the alert rules and dashboards use).")
    gpu_memory_full_ratio: float = Field(0.98, gt=0, le=1, description="Alert when a GPU's framebuffer is this full "
                                         "for 15 minutes. Default 0.98 (the engines reserve about 0.9 on purpose).")
    disk_free_ratio: float = Field(0.1, gt=0, lt=1, description="Training node: alert when its storage folder "
                                                                "has less than this share free. Default 0.1.")
    files_dir: str = Field("/etc/gpuhosts/monitoring", description="Folder on the machine (the Proxmox host or the training node) the "
                           "rule files, file_sd targets, scrape fragments, DCGM counters and dashboards are written "
                           "to, for a Prometheus and a Grafana to read. Default /etc/gpuhosts/monitoring.")
    monitor_token_file: str | None = Field(None, description="Training node: the file a Prometheus reads the "
                                           "monitor's bearer token from (scrape_config authorization "
                                           "credentials_file), never the token itself. Default the monitor's own "
                                           "token file (/etc/gpuhosts/monitor.token, root's, 0600): a Prometheus "
                                           "that is not root needs a copy it may read, named here.")

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        return ip_address(value)

    @field_validator("dcgm_version", "dcgm_exporter_version")
    @classmethod
    def _debian_version(cls, value: str) -> str:
        # deb-version(7): [epoch:]upstream[-revision], upstream starting with a digit.
        if not DEBIAN_VERSION.fullmatch(value):
            raise ValueError(f"{value!r} is not a Debian package version ([epoch:]upstream[-revision], e.g. "
                             f"{DCGM_VERSION}); `apt-cache policy datacenter-gpu-manager-4-core` lists them")
        return value

    @field_validator("files_dir")
    @classmethod
    def _files_dir(cls, value: str) -> str:
        # A folder of its own: teardown removes what gpuhosts wrote there and then the folder once it is empty.
        path = _absolute(value)
        if path.count("/") < 2:
            raise ValueError(f"{path} is a top-level directory; give a folder of its own, e.g. /etc/gpuhosts/monitoring")
        return path

    @field_validator("monitor_token_file")
    @classmethod
    def _token_file(cls, value: str | None) -> str | None:
        return value if value is None else _absolute(value)


def _absolute(value: str) -> str:
    if not value.startswith("/") or posixpath.normpath(value) != value:
        raise ValueError(f"{value!r} is not an absolute, normalised path (from /, no '.', '..', '//' or trailing /)")
    return value

class StackConfig(_Model):
    host: HostConfig
    nvidia: NvidiaConfig | None = None
    gpus: tuple[GpuConfig, ...] = ()
    containers: tuple[ContainerConfig, ...] = ()
    # gpuhosts.services.ServiceConfig entries; typed there, which imports this module.
    services: tuple[Any, ...] = ()
    # Warnings of the compatibility rules (gpuhosts/compat-rules.yaml) against the services.
    service_warnings: tuple[str, ...] = ()
    # gpuhosts.benchmarks.BenchmarkConfig entries.
    benchmarks: tuple[Any, ...] = ()
    # Exporters and the files a Prometheus reads; None: no monitoring is installed.
    monitoring: MonitoringSpec | None = None

    def benchmarks_in(self, vmid: int) -> list[Any]:
        return [b for b in self.benchmarks if b.container == vmid]

    def services_in(self, vmid: int) -> list[Any]:
        """The engine instances that run in container `vmid`: each service, or each of its replicas there."""
        return [i for s in self.services for i in s.instances if i.container == vmid]

    def gpus_for(self, use: GpuUse) -> list[GpuConfig]:
        return sorted((g for g in self.gpus if g.use is use), key=lambda g: g.address)

    def container_gpus(self, vmid: int) -> list[GpuConfig]:
        return [g for g in self.gpus_for(GpuUse.CONTAINER) if g.container == vmid]

    @property
    def nvidia_gpus(self) -> list[GpuConfig]:
        return sorted((g for g in self.gpus if g.use is not GpuUse.VFIO), key=lambda g: g.address)

    def warnings(self) -> list[str]:
        found = []
        if self.host.ssh.insecure_ignore_host_key:
            found.append(
                f"{NAMESPACE}:host.ssh.insecureIgnoreHostKey is true: the host's identity is not checked; pin hostKey instead"
            )
        found += ssh_placeholders("host", self.host.ssh)
        # Beside a real address a placeholder digest is refused (_cross_field_problems); beside a placeholder address
        # the address's warning already says the file is not filled in yet.
        if self.nvidia is not None and self.nvidia.url and placeholder_url(self.nvidia.url):
            found.append(f"{NAMESPACE}:nvidia.url points at a placeholder host ({self.nvidia.url})")
        for index, service in enumerate(self.services):
            for field, spec in (("model", service.model), ("speculative.drafter", service.speculative.drafter)):
                if spec is not None and spec.num_layers is None and model_facts(spec.repo).num_layers is None:
                    found.append(f"{NAMESPACE}:services[{index}].{field}.repo {spec.repo} is not in the known-models "
                                 "table: its layer count and layer ids are not checked (give numLayers to check them)")
        for index, container in enumerate(self.containers):
            if not self.container_gpus(container.vmid):
                found.append(f"{NAMESPACE}:containers[{index}]: container {container.vmid} is declared but receives no GPU")
        return found + list(self.service_warnings)


def ssh_problems(section: str, ssh: SshConfig) -> list[Problem]:
    """The host key pinned, or its check skipped knowingly: without either, SSH would trust any key it is shown."""
    if ssh.host_key is None and not ssh.insecure_ignore_host_key:
        return [Problem(path=f"{NAMESPACE}:{section}.ssh.hostKey", message=(
            "is required: pin the host key (`ssh-keyscan -t ed25519 HOST`), or set insecureIgnoreHostKey: true to "
            "skip the check knowingly"))]
    if ssh.host_key is not None and ssh.insecure_ignore_host_key:
        return [Problem(path=f"{NAMESPACE}:{section}.ssh.insecureIgnoreHostKey",
                        message="is true while hostKey is pinned: they are mutually exclusive; remove one")]
    if placeholder_host_key(ssh.host_key) and not placeholder_address(ssh.host):
        return [Problem(path=f"{NAMESPACE}:{section}.ssh.hostKey", message=(
            f"is the placeholder key of the committed stack files, and ssh.host {ssh.host} is a real address: put in "
            f"the host's own key, from `ssh-keyscan -t ed25519 {ssh.host}`"))]
    return []


def ssh_placeholders(section: str, ssh: SshConfig) -> list[str]:
    if not placeholder_address(ssh.host):
        return []
    return [f"{NAMESPACE}:{section}.ssh.host {ssh.host} is a placeholder (a documentation address or example name); "
            f"put in the host's address, and its key from `ssh-keyscan -t ed25519 ADDRESS` as {section}.ssh.hostKey "
            "(the key pinned beside a placeholder address is a placeholder too)"]


def _path(loc: tuple[Any, ...]) -> str:
    text = f"{NAMESPACE}:{loc[0]}"
    for part in loc[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


# What each `pattern=` of the typed models takes, in words: a refusal says the words, never the regex
# (tests/test_messages.py holds every pattern of the models to having words here).
PATTERN_WORDS = {
    r"^3\.\d{1,2}$": 'a Python 3 release, quoted, e.g. "3.12"',
    r"^[a-zA-Z_:][a-zA-Z0-9_:]*$": "a Prometheus metric name: letters, digits, '_' and ':', not beginning with a digit",
    r"^[a-z][a-z0-9_-]{0,39}$": "1 to 40 lower-case letters, digits, '_' or '-', beginning with a letter",
    r"^/[A-Za-z0-9_/.-]{0,80}$": "a URL path: '/' and then up to 80 letters, digits, '_', '/', '.' or '-'",
    r"^[a-z0-9_]{1,40}$": "1 to 40 lower-case letters, digits or '_'",
    r"^[A-Za-z0-9_.-]{1,64}$": "1 to 64 letters, digits, '_', '.' or '-'",
    r"^[a-z0-9][a-z0-9._-]{0,39}$": "1 to 40 lower-case letters, digits, '.', '_' or '-', beginning with a letter or digit",
    r"^[a-z_]+$|^\{.*\}$": 'a loss name (lower-case letters and \'_\', e.g. kl_div) or a JSON map of weights, e.g. '
                           '\'{"ce": 0.1, "tv": 0.9}\'',
    r"^\d+\.\d+$": 'a release as major.minor, quoted, e.g. "9.1"',
}
# Pydantic's refusals of a value's type, in the words of a stack file (YAML).
TYPE_WORDS = {
    "tuple_type": "a list, e.g. [a, b]", "list_type": "a list, e.g. [a, b]", "set_type": "a list, e.g. [a, b]",
    "dict_type": "a mapping of settings (name: value)", "model_type": "a mapping of settings (name: value)",
    "model_attributes_type": "a mapping of settings (name: value)",
    "string_type": "text (quote it)", "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
}
BOUND_WORDS = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
               "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than")}


def _given(value: Any) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 60 else shown[:57] + "…"


def _pydantic_problems(error: ValidationError, prefix: tuple[Any, ...]) -> list[Problem]:
    problems = []
    for item in error.errors():
        loc = prefix + tuple(item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        kind, context = item["type"], item.get("ctx") or {}
        if kind == "extra_forbidden":
            message = f"unknown field {loc[-1]!r}; remove it or check its spelling"
        elif kind == "missing":
            message = "is required"
        elif kind == "enum":
            message = f"{item['input']!r} is not allowed; use one of: {context['expected']}"
        elif kind in TYPE_WORDS:
            message = f"must be {TYPE_WORDS[kind]}, not {_given(item['input'])}"
        elif kind in BOUND_WORDS:
            key, words = BOUND_WORDS[kind]
            message = f"must be {words} {context[key]}, not {_given(item['input'])}"
        elif kind == "string_pattern_mismatch":
            words = PATTERN_WORDS.get(context.get("pattern"), "")
            message = f"{_given(item['input'])} is not " + (words or "of the form this setting takes")
        elif kind in ("string_too_long", "string_too_short", "too_long", "too_short"):
            message = message.replace("String should", "must").replace("List should", "must").replace(
                "should", "must") + f", not {_given(item['input'])}"
        problems.append(Problem(path=_path(loc), message=message))
    return problems


def _cross_field_problems(host: HostConfig | None, nvidia: NvidiaConfig | None, nvidia_given: bool,
                          gpus: list[tuple[int, GpuConfig]], containers: list[tuple[int, ContainerConfig]]) -> list[Problem]:
    """Rules across fields, over the entries that passed their own validation (indices as the user wrote them)."""
    problems: list[Problem] = []

    def add(path: str, message: str) -> None:
        problems.append(Problem(path=f"{NAMESPACE}:{path}", message=message))

    if host is not None:
        problems += ssh_problems("host", host.ssh)
        if nvidia is not None and placeholder_digest(nvidia.sha256) and not placeholder_address(host.ssh.host):
            add("nvidia.sha256", f"is a placeholder ({nvidia.sha256[:8]}…), and host.ssh.host {host.ssh.host} is a "
                f"real address: put in the digest of the installer, `sha256sum {nvidia.run_file}`")
        if host.proxmox_release is not None:
            release = host_row(host.proxmox_release)
            if release is None:
                known = ", ".join(row.release for row in load_rule_file().hosts)
                add("host.proxmoxRelease", f"Proxmox VE {host.proxmox_release} is not in gpuhosts/compat-rules.yaml "
                    f"hosts (known: {known}); add a row once its kernel series and pve-container are checked")
            elif nvidia is not None and (why := driver_kernel_problem(nvidia.version, release.kernel_series)):
                add("nvidia.version", f"{nvidia.version} does not build on the {release.kernel_series} kernels of "
                    f"Proxmox VE {release.release} (host.proxmoxRelease): {why}")

    seen_slots: dict[str, int] = {}
    for index, gpu in gpus:
        if gpu.slot in seen_slots:
            add(f"gpus[{index}].address", f"{gpu.address} is already declared as gpus[{seen_slots[gpu.slot]}]; "
                "declare each GPU once")
        else:
            seen_slots[gpu.slot] = index

    vmids: dict[int, int] = {}
    for index, container in containers:
        if container.vmid in vmids:
            add(f"containers[{index}].vmid", f"{container.vmid} is already declared as containers[{vmids[container.vmid]}]; "
                "vmids are unique on a host")
        else:
            vmids[container.vmid] = index

    for index, gpu in gpus:
        if gpu.use is GpuUse.CONTAINER:
            if gpu.container is None:
                add(f"gpus[{index}].container", "is required when use is container: name the vmid that receives the GPU")
            elif gpu.container not in vmids:
                add(f"gpus[{index}].container", f"container {gpu.container} is not declared; add "
                    f"{{vmid: {gpu.container}, hostname: …}} to {NAMESPACE}:containers or fix the vmid")
        elif gpu.container is not None:
            add(f"gpus[{index}].container", f"is set but use is {gpu.use.value}; remove container: or set use: container")

    if not nvidia_given and any(gpu.use is not GpuUse.VFIO for _, gpu in gpus):
        add("nvidia", "is required: GPUs with use host or container need the NVIDIA driver (version, sha256)")
    return problems


def namespace_problems(keys) -> list[Problem]:
    """Config keys in a namespace that looks like a misspelt `gpuhosts`: under `pulumi up` the program would not see
    them, so the section they hold would silently be empty (and a converged host torn down to match)."""
    problems = []
    for key in sorted(keys):
        namespace, _, name = str(key).partition(":")
        if namespace == NAMESPACE or not name:
            continue
        if namespace.lower() == NAMESPACE or difflib.SequenceMatcher(None, namespace.lower(), NAMESPACE).ratio() >= 0.75:
            problems.append(Problem(path=str(key), message=f"namespace {namespace!r} is not {NAMESPACE!r}; did you mean "
                                                           f"{NAMESPACE}:{name}?"))
    return problems


class StackKind(str, Enum):
    PROXMOX = "proxmox"
    TRAINER = "trainer"


KIND_HELP = f"set {NAMESPACE}:kind: proxmox (a Proxmox VE host) or trainer (a training node)"


def stack_kind(raw: dict[str, Any]) -> StackKind:
    """Which kind of stack this is, as it says itself (`gpuhosts:kind`): never guessed from its sections."""
    value = raw.get("kind")
    try:
        return StackKind(value)
    except ValueError:
        raise ConfigError([Problem(path=f"{NAMESPACE}:kind", message=(
            "is required" if value is None else f"{value!r} is not a kind of stack") + f"; {KIND_HELP}")]) from None


def kind_problems(raw: dict[str, Any], kind: StackKind) -> list[Problem]:
    value = raw.get("kind")
    if value is None or value == kind.value:
        return []
    return [Problem(path=f"{NAMESPACE}:kind", message=f"{value!r} does not match the stack's sections, which are a "
                                                      f"{kind.value} stack's; {KIND_HELP}")]


def stray_key_problems(raw: dict[str, Any], sections: tuple[str, ...], known_secrets: tuple[str, ...],
                       named_secrets: set[str], secret_keys: set[str] | frozenset[str], unknown: str) -> list[Problem]:
    """Keys of a stack that are neither its sections nor set as secrets: a secret given in plain text (said without
    its value), or an unknown key with the nearest known one."""
    return [
        Problem(path=f"{NAMESPACE}:{key}",
                message=f"holds a secret as plain text; remove it and run `pulumi config set --secret {NAMESPACE}:{key}`"
                if key in set(known_secrets) | named_secrets else unknown + _suggest(key, sections + known_secrets))
        for key in sorted(raw) if key not in sections and key not in secret_keys and raw[key] is not None
    ]


def validate_entries(model: type[_Model], raw: Any, key: str, problems: list[Problem]) -> list[tuple[int, Any]]:
    """Each entry of the list `gpuhosts:<key>` on its own: problems are appended, valid entries returned with
    their index, so one run names every bad entry."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(Problem(path=f"{NAMESPACE}:{key}", message="must be a list"))
        return []
    checked = [(i, _validate_at(model, item, (key, i), problems)) for i, item in enumerate(raw)]
    return [(i, item) for i, item in checked if item is not None]


def _validate_at(model: type[_Model], value: Any, loc: tuple[Any, ...], problems: list[Problem]) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as error:
        problems += _pydantic_problems(error, loc)
        return None


def _suggest(key: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, choices, n=1)
    return f"; did you mean {NAMESPACE}:{close[0]}?" if close else f"; known: {', '.join(choices)}"

