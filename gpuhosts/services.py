"""Typed configuration of `gpuhosts:services`: inference engines served from a GPU container.

Each entry names an engine pinned to a release or a git ref, the model and its revision, the container's GPUs it
runs on, where it listens, and its speculative decoding. Field rules live on the models; rules across entries and
against the rest of the stack live in `_service_problems`. What an engine serves at all is its driver's to say
(gpuhosts/engines/); rules that encode what a release of an engine can and cannot do are data
(`gpuhosts/compat-rules.yaml`) and are checked by `gpuhosts.compat`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gpuhosts.fields import HF_REPO, HF_REVISION as REVISION, binds_meet, did_you_mean, ip_address, is_loopback, safe_directory
from gpuhosts.config import (
    NAMESPACE,
    PCI_ADDRESS,
    ConfigError,
    Problem,
    StackConfig,
    _Model,
    validate_entries,
)

SERVICE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
# Three or four numbers (speculators publishes 0.7.0.1 and 0.7.0.2), then at most one pre, post or dev part.
RELEASE = re.compile(r"^\d+\.\d+\.\d+(?:\.\d+)?(?:(?:a|b|rc|\.post|\.dev)\d+)?$")
FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
ENGINE_NAME = r"^[a-z][a-z0-9_-]{0,39}$"
SECRET_FLAGS = ("--api-key", "--hf-token", "--token")


class SpecMethod(str, Enum):
    NONE = "none"
    MTP = "mtp"
    DFLASH = "dflash"
    EAGLE3 = "eagle3"


class WeightsOn(str, Enum):
    CONTAINER = "container"
    HOST = "host"


def _release(value: Any) -> Any:
    if isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is a number; quote it (\"0.5.11\") — YAML reads 0.5.10 as text but 0.10 as 0.1")
    text = str(value)
    if not RELEASE.match(text):
        raise ValueError(f"{text!r} is not an exact release; pin it, e.g. \"0.5.11\"")
    return text


class PackageSpec(_Model):
    """A Python package pinned to a release, or built from a git ref of its repository."""

    version: str = Field(
        description="Exact release installed from PyPI, or, with gitRef, the release that ref is based on (the "
                    "compatibility rules read it)."
    )
    git_ref: str | None = Field(
        None, description="Build from this full 40-hex commit of the repository instead (a pull request's head: "
                          "`git ls-remote REPO refs/pull/N/head` prints it; list the PR in includesPrs). A branch, "
                          "tag or PR ref is refused: it may move under the lock. Default none (the release)."
    )
    repository: str | None = Field(None, description="Git repository for gitRef (and a checkout of its scripts); "
                                                     "default the project's upstream.")
    scripts_commit: str | None = Field(
        None, description="speculators: the full 40-hex commit of `repository` whose scripts/ the node runs. Default "
                          "the commit the release's tag names upstream (gpuhosts/compat-rules.yaml releaseCommits); "
                          "required with a repository of your own.")
    includes_prs: tuple[int, ...] = Field(
        (), description="Pull requests of the repository the installed build contains beyond its release (a build of "
                        "a PR's head commit lists that PR too). Default none."
    )

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        return _release(value)

    @field_validator("git_ref")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        if value is not None and not FULL_COMMIT.match(value):
            raise ValueError(f"{value!r} is not a full commit: a branch, tag or pull request ref may move; pin the 40 hex "
                             f"digits it names now (`git ls-remote REPOSITORY {value}`), and for a pull request's "
                             "head list the PR in includesPrs")
        return value

    @field_validator("scripts_commit")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{40}", value):
            raise ValueError(f"{value!r} is not a full commit; write the 40 hex digits `git rev-parse TAG^{{commit}}` "
                             "prints")
        return value

    def contains(self, pr: int) -> bool:
        return pr in self.includes_prs


class EngineSpec(PackageSpec):
    # Which names have a driver, and what each engine serves, is the drivers' to say (gpuhosts/engines/
    # `service_problems`, checked with the whole stack).
    name: str = Field(pattern=ENGINE_NAME, description="The engine, by the name of its driver in gpuhosts/engines/ "
                                                       "(e.g. `sglang`, `vllm`).")


class ModelSpec(_Model):
    repo: str = Field(description="Hugging Face repository of the weights (`Qwen/Qwen3.6-27B`).")
    revision: str = Field("main", description="Branch, tag or commit to download; pin a commit for repeatable deploys. Default main.")
    local_dir: str | None = Field(None, description="Where the weights live in the container. Default /srv/models/<repo>.")
    num_layers: int | None = Field(
        None, ge=1, description="The model's `num_hidden_layers`; default from the known-models table of compat-rules.yaml."
    )

    delete_on_destroy: bool = Field(
        False, description="Delete the downloaded weights on `pulumi destroy`. Default false: weights are kept."
    )
    size_gb: float | None = Field(
        None, gt=0, description="Size on disk: what a pre-flight disk check counts before the download; default from the model table."
    )

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not HF_REPO.match(value):
            raise ValueError(f"{value!r} is not a Hugging Face repository; write it as owner/name")
        return value

    @field_validator("revision", mode="before")
    @classmethod
    def _revision(cls, value: Any) -> Any:
        if not REVISION.match(str(value)):
            raise ValueError(f"{value!r} is not a revision; use a branch, tag or commit hash")
        return str(value)

    @field_validator("local_dir")
    @classmethod
    def _dir(cls, value: str | None) -> str | None:
        return None if value is None else safe_directory(value)

    @property
    def path(self) -> str:
        return self.local_dir or f"/srv/models/{self.repo}"


class DrafterSpec(ModelSpec):
    repo: str = Field(description="Hugging Face repository of the drafter's weights (`z-lab/Qwen3.6-27B-DFlash`).")
    num_layers: int | None = Field(None, ge=1, description="The drafter's own decoder layers; default from the known-models table.")
    target_layer_ids: tuple[int, ...] | None = Field(
        None, description="dflash_config.target_layer_ids as the drafter was trained; default derived from the target "
                          "(evenly spaced from 1 to N-3) — a guessed list gives about 1 % acceptance."
    )
    sliding_window: bool | None = Field(
        None, description="Whether the drafter has sliding-window layers (its config.json `layer_types`); default from "
                          "the known-models table."
    )
    gated: bool = Field(False, description="The repository needs a Hugging Face token (gpuhosts:hfToken). Default false.")


class SpeculativeSpec(_Model):
    method: SpecMethod = Field(SpecMethod.NONE, description="`none` (default), `mtp` (NEXTN), `dflash` or `eagle3`.")
    num_steps: int = Field(3, ge=1, le=16, description="mtp/eagle3: draft steps. Default 3.")
    eagle_topk: int = Field(1, ge=1, le=16, description="mtp/eagle3: branches per step. Default 1.")
    num_draft_tokens: int = Field(4, ge=2, le=64, description="mtp/eagle3: tokens verified per step. Default 4.")
    num_speculative_tokens: int = Field(15, ge=1, le=64, description="dflash: tokens drafted per block. Default 15.")
    drafter: DrafterSpec | None = Field(None, description="The draft model, required for dflash and eagle3.")

    @model_validator(mode="after")
    def _drafter(self) -> "SpeculativeSpec":
        if self.method in (SpecMethod.DFLASH, SpecMethod.EAGLE3) and self.drafter is None:
            raise ValueError(f"method {self.method.value} needs drafter: {{repo, revision}}")
        if self.method in (SpecMethod.NONE, SpecMethod.MTP) and self.drafter is not None:
            raise ValueError(f"method {self.method.value} uses no separate drafter; remove drafter:")
        if self.method in (SpecMethod.MTP, SpecMethod.EAGLE3) and self.num_draft_tokens > self.num_steps * self.eagle_topk + 1:
            raise ValueError(f"numDraftTokens {self.num_draft_tokens} exceeds numSteps × eagleTopk + 1 "
                             f"({self.num_steps * self.eagle_topk + 1}), which is all a draft tree can hold")
        return self


class GateSpec(_Model):
    min_acceptance_length: float | None = Field(
        None, ge=1, description="Fail the deploy below this mean acceptance length (tokens per verify step). Default: "
                                "1.5 with speculative decoding, unchecked without."
    )
    min_acceptance_rate: float | None = Field(
        None, gt=0, le=1, description="Fail below this draft-token acceptance rate. Default: 0.1 with speculative decoding."
    )
    min_decode_tokens_per_s: float = Field(10.0, gt=0, description="Fail below this single-stream decode rate. Default 10.")
    max_tokens: int = Field(256, ge=16, le=4096, description="Tokens generated by the timed request. Default 256.")
    ready_timeout_s: int = Field(1800, ge=30, description="How long to wait for /health after a (re)start. Default 1800.")


def _gpu_addresses(value: Any) -> Any:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError("must list at least one PCI address of the container's GPUs")
    addresses = []
    for item in value:
        match = PCI_ADDRESS.match(str(item).strip())
        if not match or match["fn"] != "0":
            raise ValueError(f"{item!r} is not a GPU's PCI address (function .0), e.g. 0000:41:00.0")
        addresses.append(f"{(match['domain'] or '0000')}:{match['bus']}:{match['slot']}.0".lower())
    return tuple(addresses)


class ReplicaSpec(_Model):
    """One copy of a service's engine on GPUs of its own."""

    gpus: tuple[str, ...] = Field(description="PCI addresses of the GPUs this replica uses, all of its container's.")
    container: int | None = Field(None, description="vmid of the container the replica runs in. Default the service's.")
    port: int | None = Field(None, ge=1024, le=65535, description="Port of the replica's API. Default the service's; "
                                                                "replicas in one container need ports of their own.")
    address: str | None = Field(
        None, description="Address the gateway reaches the replica at. Default 127.0.0.1, for a replica in the "
                          "gateway's container; required for one in another container (with bind not 127.0.0.1).")

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        return _gpu_addresses(value)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return None if value is None else ip_address(value)


class RouterPolicy(str, Enum):
    # smg 1.13.0 router_args.py COMMON_POLICY_CHOICES (the ones that need no routing key or manual assignment).
    CACHE_AWARE = "cache_aware"
    ROUND_ROBIN = "round_robin"
    POWER_OF_TWO = "power_of_two"
    LEAST_LOAD = "least_load"
    RANDOM = "random"


# The router release gpuhosts installs by default; `make locks` keeps its lock whether or not a stack names it.
ROUTER = "smg"
ROUTER_VERSION = "1.13.0"


class GatewayHealth(_Model):
    """How the gateway checks each replica (smg --health-check-* flags; its defaults differ: 60 s between checks)."""

    endpoint: str = Field("/health", pattern=r"^/[A-Za-z0-9_/.-]{0,80}$",
                          description="Path the gateway polls on each replica. Default /health.")
    interval_s: int = Field(10, ge=1, le=3600, description="Seconds between checks. Default 10.")
    timeout_s: int = Field(5, ge=1, le=600, description="Seconds a check may take. Default 5.")
    failure_threshold: int = Field(3, ge=1, le=100, description="Failed checks before a replica is taken out. Default 3.")
    success_threshold: int = Field(2, ge=1, le=100, description="Passed checks before it is put back. Default 2.")


class GatewaySpec(_Model):
    """A model gateway (smg, the Shepherd Model Gateway) in front of the service's replicas; its workers are the
    replicas, derived, never listed."""

    version: str = Field(ROUTER_VERSION, description=f"Release of the `{ROUTER}` wheel, from its committed lock. "
                                                     f"Default {ROUTER_VERSION}.")
    container: int | None = Field(None, description="vmid of the container the gateway runs in. Default the service's.")
    port: int = Field(ge=1024, le=65535, description="Port of the gateway's OpenAI-compatible API.")
    bind: str = Field("127.0.0.1", description="Address to listen on. Default 127.0.0.1; 0.0.0.0 for the network.")
    policy: RouterPolicy = Field(RouterPolicy.CACHE_AWARE, description="Routing policy: `cache_aware` (default, "
                                 "smg's), `round_robin`, `power_of_two`, `least_load` or `random`.")
    health: GatewayHealth = Field(GatewayHealth(), description="Health checks of the replicas.")
    api_key_secret: str | None = Field(
        None, description="Secret stack key of the key clients send the gateway, which it also sends the replicas; "
                          "it reaches the gateway only through a 0600 EnvironmentFile. Default the service's apiKeySecret.")
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$", description="Python of the gateway's uv environment. Default 3.12.")

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        return _release(value)

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        return ip_address(value)


class ServiceConfig(_Model):
    name: str = Field(description="Service name: the unit is gpuhosts-<name>.service inside the container.")
    container: int = Field(description="vmid of the container the service runs in.")
    enabled: bool = Field(True, description="Run the service (enabled and started). Default true; false installs it stopped.")
    engine: EngineSpec = Field(description="The engine and its release: its driver's name (gpuhosts/engines: sglang, "
                               "vllm), the version, and optionally a git build of it.")
    model: ModelSpec = Field(description="The model served: its Hugging Face repo and revision, and the folder in the "
                             "container it is downloaded to.")
    served_model_name: str | None = Field(None, description="Name clients send as `model`; default the repo's name.")
    weights_on: WeightsOn = Field(
        WeightsOn.CONTAINER, description="`container` (default): weights in the container's own disk; `host`: on host "
                                         "storage bind-mounted into the container, so they survive a rebuild."
    )
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$", description="Python of the engine's uv environment. Default 3.12.")
    tensor_parallel_size: int = Field(1, ge=1, le=16, description="GPUs one model copy is split over. Default 1.")
    gpus: tuple[str, ...] = Field((), description="PCI addresses of the container's GPUs this service uses; with "
                                                  "replicas each replica lists its own instead.")
    port: int = Field(ge=1024, le=65535, description="TCP port of the OpenAI-compatible API.")
    bind: str = Field("127.0.0.1", description="Address to listen on. Default 127.0.0.1; 0.0.0.0 for the network.")
    context_length: int | None = Field(None, ge=512, description="Maximum context; default the model's.")
    mem_fraction: float | None = Field(
        None, gt=0, lt=1, description="GPU memory share for weights and KV cache (SGLang --mem-fraction-static, vLLM "
                                      "--gpu-memory-utilization); default the engine's."
    )
    reasoning_parser: str | None = Field(None, pattern=r"^[a-z0-9_]{1,40}$",
                                         description="Reasoning parser (`qwen3`); default none.")
    tool_call_parser: str | None = Field(
        None, pattern=r"^[a-z0-9_]{1,40}$",
        description="Tool-call parser of the engine (`qwen3_coder` for Qwen3.6; vLLM also gets "
                    "--enable-auto-tool-choice); default none: tool calls come back as plain text.")
    speculative: SpeculativeSpec = Field(SpeculativeSpec(), description="Speculative decoding. Default none.")
    mamba_scheduler_strategy: str | None = Field(
        None, description="SGLang --mamba-scheduler-strategy; default derived (extra_buffer for speculative decoding on "
                          "GDN-hybrid models)."
    )
    api_key_secret: str | None = Field(
        None, description="Name of the secret stack key holding the API key (`llmApiKey` for gpuhosts:llmApiKey); "
                          "it reaches the engine only through a 0600 EnvironmentFile. Default: no key."
    )
    environment: dict[str, str] = Field({}, description="Extra environment of the engine; never secrets.")
    extra_args: tuple[str, ...] = Field((), description="Extra engine flags, appended; never ones gpuhosts derives.")
    shares_with: tuple[str, ...] = Field(
        (), description="Services this one knowingly shares its port or GPUs with; at most one of them runs at a time."
    )
    gate: GateSpec = Field(GateSpec(), description="Post-deploy thresholds.")
    replicas: tuple[ReplicaSpec, ...] = Field(
        (), description="Copies of the engine, each on GPUs of its own, in this container or others; a change goes "
                        "through them one at a time. Without it, the service is one instance on its own gpus and port.")
    gateway: GatewaySpec | None = Field(None, description="A model gateway in front of the replicas. Default none.")

    # Set on the copies `instances` makes: the declaring service's name and the replica's index and address.
    _family: str | None = PrivateAttr(None)
    _replica: int = PrivateAttr(0)
    _address: str | None = PrivateAttr(None)

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        return ip_address(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SERVICE_NAME.match(value):
            raise ValueError("must be lower-case letters, digits and '-', starting with a letter, e.g. qwen-sglang")
        return value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        return _gpu_addresses(value)

    @field_validator("environment")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if any(word in key for word in ("TOKEN", "API_KEY", "SECRET", "PASSWORD")):
                raise ValueError(f"{key} looks like a secret; remove it: secrets come from secret stack keys "
                                 "(`pulumi config set --secret gpuhosts:NAME`), never from plain config")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            if arg.split("=", 1)[0] in SECRET_FLAGS:
                raise ValueError(f"{arg.split('=', 1)[0]} would put a secret on the command line; use apiKeySecret")
        return value

    @property
    def unit_name(self) -> str:
        return f"gpuhosts-{self.name}.service"

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model.repo.split("/", 1)[1]

    def replica_name(self, index: int) -> str:
        """Replica 0 keeps the service's own name, so adding replicas never renames the running one."""
        return self.name if index == 0 else f"{self.name}-r{index}"

    @property
    def family(self) -> str:
        """The name of the service that declared this instance."""
        return self._family or self.name

    @property
    def replica(self) -> int:
        return self._replica

    @property
    def reach_address(self) -> str | None:
        """The address the gateway reaches this instance at, where the stack gives one."""
        return self._address

    @property
    def instances(self) -> tuple["ServiceConfig", ...]:
        """The engine copies the service runs: itself, or one per replica, each a service of its own name,
        container, GPUs and port (the gateway stays with the declaring service)."""
        if not self.replicas:
            return (self,)
        copies = []
        for index, replica in enumerate(self.replicas):
            copy = self.model_copy(update={
                "name": self.replica_name(index), "container": replica.container or self.container,
                "gpus": replica.gpus, "port": replica.port or self.port, "replicas": (), "gateway": None})
            copy._family, copy._replica, copy._address = self.name, index, replica.address
            copies.append(copy)
        return tuple(copies)

    @property
    def gateway_container(self) -> int:
        return (self.gateway.container if self.gateway else None) or self.container


def _section_path(index: int, field: str = "") -> str:
    return f"{NAMESPACE}:services[{index}]" + (f".{field}" if field else "")


@dataclass(frozen=True)
class ServiceRuleInput:
    """What the service rules read: the validated entries by their index in `gpuhosts:services`, the stack, and
    which secret keys the stack sets."""
    services: list[tuple[int, ServiceConfig]]
    stack: StackConfig
    secret_keys: frozenset[str]

    @property
    def names(self) -> dict[str, int]:
        """Each service's name and the first entry that declares it."""
        found: dict[str, int] = {}
        for index, service in self.services:
            found.setdefault(service.name, index)
        return found


# A rule yields (entry index, field under it, message) for each problem it finds.
Finding = tuple[int, str, str]


def repeated_names(entries, section: str) -> Iterator[Finding]:
    """Each entry of `section` whose name an earlier entry already declares."""
    seen: dict[str, int] = {}
    for index, entry in entries:
        if entry.name in seen:
            yield index, "name", f"{entry.name!r} is already declared as {section}[{seen[entry.name]}]; names are unique"
        seen.setdefault(entry.name, index)


def names_are_unique(given: ServiceRuleInput) -> Iterator[Finding]:
    return repeated_names(given.services, "services")


def replica_names_are_free(given: ServiceRuleInput) -> Iterator[Finding]:
    names = given.names
    for index, service in given.services:
        for instance in service.instances[1:]:
            if instance.name in names:
                yield index, f"replicas[{instance.replica}]", (
                    f"is named {instance.name}, which is already services[{names[instance.name]}]; rename one of "
                    "the two services")


def gpus_or_replicas(given: ServiceRuleInput) -> Iterator[Finding]:
    for index, service in given.services:
        if not service.replicas and not service.gpus:
            yield index, "gpus", "is required: list the container's GPUs this service uses, or give replicas"
        if service.replicas and service.gpus:
            yield index, "gpus", "is set beside replicas: each replica lists its own gpus; remove one of the two"


def gpus_are_the_containers(given: ServiceRuleInput) -> Iterator[Finding]:
    """Each instance runs in a declared container, on GPUs that container holds."""
    stack = given.stack
    vmids = {c.vmid for c in stack.containers}
    declared = {g.address: (position, g) for position, g in enumerate(stack.gpus)}
    for index, service in given.services:
        for instance in service.instances:
            where = f"replicas[{instance.replica}]." if service.replicas else ""
            if instance.container not in vmids:
                yield index, f"{where}container", (f"container {instance.container} is not declared in "
                                                   f"{NAMESPACE}:containers")
                continue
            owned = {g.address for g in stack.container_gpus(instance.container)}
            for position, address in enumerate(instance.gpus):
                if address in owned:
                    continue
                gpu = declared.get(address)
                if gpu is not None and gpu[1].use.value == "vfio":
                    why = (f"{address} is not one of container {instance.container}'s GPUs: it is "
                           f"gpus[{gpu[0]}], use: vfio, which stays on vfio-pci for the VMs; give the "
                           f"{'replica' if where else 'service'} a GPU with use: container")
                else:
                    why = (f"{address} is not one of container {instance.container}'s GPUs "
                           f"({', '.join(sorted(owned)) or 'none'}); give it use: container, "
                           f"container: {instance.container}")
                yield index, f"{where}gpus[{position}]", why


def replicas_keep_to_their_own(given: ServiceRuleInput) -> Iterator[Finding]:
    """An instance lists each GPU once; replicas share no GPU, nor a port in one container."""
    for index, service in given.services:
        taken: dict[str, int] = {}
        listening: dict[tuple[int, int], int] = {}
        for instance in service.instances:
            where = f"replicas[{instance.replica}]." if service.replicas else ""
            if len(set(instance.gpus)) != len(instance.gpus):
                yield index, f"{where}gpus", "lists a GPU twice; list each GPU once"
            for position, address in enumerate(dict.fromkeys(instance.gpus)):
                if address in taken and taken[address] != instance.replica:
                    yield index, f"{where}gpus[{position}]", (f"{address} is already replicas[{taken[address]}]'s; "
                                                              "each replica runs on GPUs of its own")
                taken.setdefault(address, instance.replica)
            spot = (instance.container, instance.port)
            if spot in listening:
                yield index, f"{where}port", (f"{instance.port} is already replicas[{listening[spot]}]'s in container "
                                              f"{instance.container}; give each replica in one container a port of its own")
            listening.setdefault(spot, instance.replica)


def gateway_rules(given: ServiceRuleInput) -> Iterator[Finding]:
    vmids = {c.vmid for c in given.stack.containers}
    for index, service in given.services:
        for problem in _gateway_problems(index, service, vmids, set(given.secret_keys)):
            yield index, problem.path.removeprefix(_section_path(index)).lstrip("."), problem.message


def api_keys_are_set(given: ServiceRuleInput) -> Iterator[Finding]:
    for index, service in given.services:
        if service.api_key_secret is not None and service.api_key_secret not in given.secret_keys:
            yield index, "apiKeySecret", unset_secret(service.api_key_secret, set(given.secret_keys))


def open_binds_need_a_key(given: ServiceRuleInput) -> Iterator[Finding]:
    """As the monitor and the gateway are held: an open engine beyond loopback runs anyone's prompts on the GPUs,
    and its admin endpoints (weights, cache, profiling) are open with it."""
    for index, service in given.services:
        if service.api_key_secret is None and not is_loopback(service.bind):
            yield index, "apiKeySecret", (
                f"is required: bind {service.bind} listens beyond this machine, and without a key anyone who "
                "reaches the port uses the engine; name a secret stack key (`pulumi config set --secret "
                "gpuhosts:llmApiKey …`, apiKeySecret: llmApiKey), or bind 127.0.0.1")


def gated_drafters_have_a_token(given: ServiceRuleInput) -> Iterator[Finding]:
    for index, service in given.services:
        drafter = service.speculative.drafter
        if drafter is not None and drafter.gated and "hfToken" not in given.secret_keys:
            yield index, "speculative.drafter.gated", (f"{drafter.repo} is gated and {NAMESPACE}:hfToken is not set; "
                                                       f"`pulumi config set --secret {NAMESPACE}:hfToken`")


def weights_lie_where_they_say(given: ServiceRuleInput) -> Iterator[Finding]:
    """weightsOn: host puts a model under the container's modelStore; weightsOn: container keeps it off it."""
    for index, service in given.services:
        store = next((c.model_store for c in given.stack.containers if c.vmid == service.container), None)
        for field, spec in (("model", service.model), ("speculative.drafter", service.speculative.drafter)):
            if spec is None:
                continue
            on_store = store is not None and (spec.path + "/").startswith(store.path + "/")
            if service.weights_on is WeightsOn.HOST and store is None:
                yield index, "weightsOn", (f"is host but container {service.container} has no modelStore; add "
                                           f"modelStore: {{hostPath: /tank/models}} to its entry in "
                                           f"{NAMESPACE}:containers")
            elif service.weights_on is WeightsOn.HOST and not on_store:
                yield index, f"{field}.localDir", (f"{spec.path} is not under the container's modelStore "
                                                   f"({store.path}); put it there or set weightsOn: container")
            elif service.weights_on is WeightsOn.CONTAINER and on_store:
                yield index, f"{field}.localDir", (f"{spec.path} lies on the host's modelStore ({store.path}); set "
                                                   "weightsOn: host, or choose a directory outside it")


def shared_services_are_declared(given: ServiceRuleInput) -> Iterator[Finding]:
    names = given.names
    for index, service in given.services:
        for other in service.shares_with:
            if other not in names:
                yield index, "sharesWith", f"{other!r} is not a declared service"
            elif other == service.name:
                yield index, "sharesWith", "names the service itself"


def one_download_per_directory(given: ServiceRuleInput) -> Iterator[Finding]:
    downloads: dict[tuple[int, str], tuple[int, str, ModelSpec]] = {}
    for index, instance in ((i, c) for i, s in given.services for c in s.instances):
        for field, spec in (("model", instance.model), ("speculative.drafter", instance.speculative.drafter)):
            if spec is None:
                continue
            key = (instance.container, spec.path)
            if key not in downloads:
                downloads[key] = (index, field, spec)
                continue
            first_index, first_field, first = downloads[key]
            if (first.repo, first.revision, first.delete_on_destroy) != (spec.repo, spec.revision, spec.delete_on_destroy):
                yield index, f"{field}.localDir", (f"{spec.path} is also services[{first_index}].{first_field}'s "
                                                   f"directory with {first.repo}@{first.revision}; one directory holds "
                                                   "one download: give the same repo, revision and deleteOnDestroy, "
                                                   "or another localDir")


# The rules of the services against each other and the rest of the stack, in the order their problems are listed.
SERVICE_RULES = (names_are_unique, replica_names_are_free, gpus_or_replicas, gpus_are_the_containers,
                 replicas_keep_to_their_own, gateway_rules, api_keys_are_set, open_binds_need_a_key,
                 gated_drafters_have_a_token, weights_lie_where_they_say, shared_services_are_declared,
                 one_download_per_directory)


def _service_problems(services: list[tuple[int, ServiceConfig]], stack: StackConfig, secret_keys: set[str]) -> list[Problem]:
    given = ServiceRuleInput(services, stack, frozenset(secret_keys))
    return [Problem(path=_section_path(index, field), message=message)
            for rule in SERVICE_RULES for index, field, message in rule(given)]


def _gateway_problems(index: int, service: ServiceConfig, vmids: set[int], secret_keys: set[str]) -> list[Problem]:
    gateway = service.gateway
    if gateway is None:
        return []
    problems: list[Problem] = []

    def add(field: str, message: str) -> None:
        problems.append(Problem(path=_section_path(index, field), message=message))

    home = service.gateway_container
    if home not in vmids:
        add("gateway.container", f"container {home} is not declared in {NAMESPACE}:containers")
    if not service.enabled:
        add("gateway", "fronts a service installed stopped (enabled: false), which has no replica to route to; "
            "enable the service or remove gateway")
    key = gateway.api_key_secret or service.api_key_secret
    if gateway.api_key_secret is not None and gateway.api_key_secret not in secret_keys:
        add("gateway.apiKeySecret", unset_secret(gateway.api_key_secret, secret_keys))
    if key is None:
        add("gateway.apiKeySecret", "is required: the gateway's API is a way into the replicas and into its own "
            "worker management; name a secret stack key here or as the service's apiKeySecret")
    for instance in service.instances:
        where = f"replicas[{instance.replica}]." if service.replicas else ""
        if instance.container == home:
            if instance.port == gateway.port and binds_meet(gateway.bind, service.bind):
                add("gateway.port", f"{gateway.port} is also the port of {instance.name} in container {home}; give "
                    "the gateway a port of its own")
            continue
        if instance.reach_address is None:
            add(f"{where}address", f"is required: the replica runs in container {instance.container} and the "
                f"gateway in container {home}; give the address the gateway reaches it at")
        if service.bind == "127.0.0.1":
            add("bind", f"is 127.0.0.1 while {instance.name} runs outside the gateway's container {home}, which "
                "could not reach it; bind 0.0.0.0 (or the container's address)")
    return problems


def validate_service_entries(raw: Any, problems: list[Problem]) -> list[tuple[int, ServiceConfig]]:
    """Each entry of `gpuhosts:services` on its own; problems are appended, valid entries returned with their index."""
    return validate_entries(ServiceConfig, raw, "services", problems)


def validate_services(raw: Any, stack: StackConfig, secret_keys: set[str] | frozenset[str] = frozenset()) -> tuple[ServiceConfig, ...]:
    """Turn the stack's `gpuhosts:services` value into typed services, or raise ConfigError naming every problem.

    `stack` is the already validated rest of the stack (containers and their GPUs); `secret_keys` the stack's secure
    keys, which apiKeySecret and gated drafters must name.
    """
    problems: list[Problem] = []
    services = validate_service_entries(raw, problems)
    if not problems:
        problems += _service_problems(services, stack, set(secret_keys))
    if problems:
        raise ConfigError(problems)
    return tuple(s for _, s in services)


def unset_secret(name: str, secret_keys: set[str]) -> str:
    """Why a named secret key is refused: the stack does not hold it, with the one it likely misspells."""
    likely = did_you_mean(name, secret_keys)
    if likely is not None:
        return (f"{NAMESPACE}:{name} is not a secret of this stack, and {NAMESPACE}:{likely} is: write {likely} "
                f"here, or set {name} with `pulumi config set --secret {NAMESPACE}:{name}`")
    return f"{NAMESPACE}:{name} is not a secret of this stack; `pulumi config set --secret {NAMESPACE}:{name}`"


def referenced_secrets(raw_services: Any) -> set[str]:
    """The secret keys a raw (unvalidated) `gpuhosts:services` value names: each apiKeySecret, and hfToken for a
    gated drafter. The program asks the engine for exactly these; the offline plan stands in for unset ones."""
    names: set[str] = set()
    for entry in raw_services if isinstance(raw_services, list) else []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("apiKeySecret"), str):
            names.add(entry["apiKeySecret"])
        gateway = entry.get("gateway")
        if isinstance(gateway, dict) and isinstance(gateway.get("apiKeySecret"), str):
            names.add(gateway["apiKeySecret"])
        drafter = ((entry.get("speculative") or {}) if isinstance(entry.get("speculative"), dict) else {}).get("drafter")
        if isinstance(drafter, dict) and drafter.get("gated") is True:
            names.add("hfToken")
    return names
