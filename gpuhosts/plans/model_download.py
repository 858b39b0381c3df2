"""ModelDownload: a model's weights (`hf download`) in its container, resumable, skipped when complete, kept on destroy.

One download per directory, shared by the services that name it. A gated repository gets the Hugging Face token
(`gpuhosts:hfToken`) through the command's stdin; inside the container it exists only as a 0600 file while `hf`
runs. After a download the weights' config.json is checked against what the plan derived from the model table
(the target's layer count, a DFlash drafter's `target_layer_ids` and sliding-window layers).
With `weightsOn: host` the directory lies on host storage that ModelStore bind-mounts into the container.
The probe reads the files themselves: a small file against the Hub's blob id hf recorded for it, a weight file by
its size and a sampled digest recorded when its download completed (templates/model_download/model-files.sh.j2);
`gpuhosts check --deep` reads every file whole against the Hub's listing (`deep_probe`).
"""

from __future__ import annotations

import shlex
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from gpuhosts.hostside.drafter_config import target_layer_ids
from gpuhosts.envspec import EnvSpec
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.plans.python_env import UV_HOME, UV_REQUIREMENT, UV_VERSION, env_marker, in_container, lock_file, probe_in
from gpuhosts.compat import model_facts
from gpuhosts.config import ContainerConfig
from gpuhosts.facts import Fact, desired, files_facts
from gpuhosts.render import render
from gpuhosts.services import DrafterSpec, ModelSpec, ServiceConfig, SpecMethod, WeightsOn
from gpuhosts.units import HubFiles, Unit

HF_TOKEN = "hfToken"
# The downloads' own `hf`: an environment of theirs, so that a download waits for no engine environment.
DOWNLOAD_TOOLS = f"{SERVICE_ROOT}/downloads"
# huggingface_hub's `hf download --revision --local-dir` (the CLI that replaced huggingface-cli).
HF_REQUIREMENT = "huggingface_hub==0.36.0"
TOOLS_PYTHON = "3.12"


@dataclass(frozen=True)
class Download:
    """One directory of weights in a container and the services that use it."""

    spec: ModelSpec
    services: tuple[str, ...]
    env: str  # the uv environment whose `hf` and Python do the work
    store: str | None
    check: dict[str, Any]
    path: str = ""
    # With weightsOn: host, where the weights lie on the host (under the container's modelStore.hostPath); the
    # download then runs on the host and waits for nothing in the container.
    host_path: str | None = None

    @property
    def directory(self) -> str:
        return self.host_path or self.path or self.spec.path

    @property
    def gated(self) -> bool:
        return isinstance(self.spec, DrafterSpec) and self.spec.gated


def _check(service: ServiceConfig, spec: ModelSpec) -> dict[str, Any]:
    """What the downloaded config.json must say, where the plan relied on it."""
    if service.speculative.method is not SpecMethod.DFLASH:
        return {}
    target_layers = service.model.num_layers or model_facts(service.model.repo).num_layers
    if spec is service.model:
        return {"num_layers": target_layers} if target_layers else {}
    drafter = service.speculative.drafter
    check: dict[str, Any] = {}
    draft_layers = drafter.num_layers or model_facts(drafter.repo).num_layers
    if target_layers and draft_layers:
        check["target_layer_ids"] = list(drafter.target_layer_ids or target_layer_ids(target_layers, draft_layers))
    sliding = drafter.sliding_window if drafter.sliding_window is not None else model_facts(drafter.repo).sliding_window
    if sliding is not None:
        check["sliding_window"] = sliding
    return check


def downloads_for(container: ContainerConfig, services: list[ServiceConfig]) -> list[Download]:
    """The container's downloads in the order services name them (config validation made shared ones agree)."""
    found: dict[str, Download] = {}
    for service in services:
        for spec in (service.model, service.speculative.drafter):
            if spec is None:
                continue
            store = container.model_store if service.weights_on is WeightsOn.HOST else None
            host_path = None if store is None else store.host_path + spec.path[len(store.path):]
            known = found.get(spec.path)
            if known is None:
                found[spec.path] = Download(spec, (service.name,), service.name, None, _check(service, spec),
                                            host_path=host_path)
            else:
                found[spec.path] = Download(known.spec, known.services + (service.name,), known.env, known.store,
                                            {**known.check, **_check(service, spec)}, host_path=known.host_path)
    return list(found.values())


def download_slug(download: Download) -> str:
    """The directory's name as a unit key: lower case, '.' and '_' as '-'; any other character makes it carry a
    digest of the name, so that two odd names cannot meet in one key."""
    name = (download.path or download.spec.path).rstrip("/").rsplit("/", 1)[-1]
    slug = name.lower().replace("_", "-").replace(".", "-")
    if re.fullmatch(r"[a-z0-9][a-z0-9-]*", slug) and len(slug) <= 40:
        return slug
    cleaned = re.sub(r"[^a-z0-9]+", "-", slug).strip("-")[:32] or "model"
    return f"{cleaned}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


# What the files of a download read as when they are what it fetched (templates/model_download/model-files.sh.j2).
SMALL_FILES_AS_FETCHED = "as the Hub's blobs"
WEIGHTS_AS_FETCHED = "as downloaded"


def download_files_facts(directory: str) -> list[Fact]:
    """The downloaded files themselves: each small file against the Hub's blob id hf recorded for it, each weight
    file's size and sampled digest against what its download recorded. A config.json edited by hand (a drafter's
    sliding_window) or a shard cut short shows, naming the file."""
    setup = (render("model_download/model-files.sh.j2").rstrip("\n"),)
    quoted = shlex.quote(directory)
    return [Fact(f"small files of {directory}", f"small_files_state {quoted}", SMALL_FILES_AS_FETCHED, setup),
            Fact(f"weight files of {directory}", f"weights_state {quoted}", WEIGHTS_AS_FETCHED, setup)]


def plan_model_download(vmid: int | None, download: Download, needs: tuple[str, ...]) -> Unit:
    spec = download.spec
    unit = (f"ct{vmid}-" if vmid is not None else "") + f"model-{download_slug(download)}"
    where = ("the host's model store" if download.host_path is not None else
             f"CT {vmid}" if vmid is not None else "the node")
    if download.host_path is not None:
        vmid = None  # on the host's model store, from the host's side
    venv = f"{DOWNLOAD_TOOLS}/venv"
    secret = HF_TOKEN if download.gated else None
    values = dict(unit=unit, vmid=vmid, repo=spec.repo, revision=spec.revision, local_dir=download.directory,
                  hf=f"{venv}/bin/hf", python=f"{venv}/bin/python", secret=secret, store=download.store,
                  check=download.check, delete=spec.delete_on_destroy, uv_version=UV_VERSION, uv_requirement=UV_REQUIREMENT, uv_home=UV_HOME,
                  tools=DOWNLOAD_TOOLS, hf_requirement=HF_REQUIREMENT, python_version=TOOLS_PYTHON,
                  envs_root=SERVICE_ROOT)
    # The downloads' own environment installs its locked closure too (gpuhosts/locks.py).
    tools_env = EnvSpec(name=DOWNLOAD_TOOLS.rsplit("/", 1)[1], requirement=HF_REQUIREMENT, package="huggingface_hub",
                        release=HF_REQUIREMENT.split("==", 1)[1], from_git=False, python=TOOLS_PYTHON)
    lock = lock_file(tools_env)
    values.update(lock=lock, hf_marker=env_marker(tools_env, lock))
    marker = f"{download.directory}/.gpuhosts-download"
    facts = [*files_facts([lock]), Fact(f"weights {download.directory}", f'cat "$root"{shlex.quote(marker)} || echo missing',
                  f"{spec.repo}@{spec.revision}"), *download_files_facts(download.directory)]
    return Unit(
        key=unit,
        kind="ModelDownload",
        ensure=in_container(unit, vmid, render("model_download/model-download.sh.j2", **values), secret=secret),
        teardown=in_container(unit, vmid, render("model_download/model-download-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, vmid, facts),
        desired=desired(facts),
        needs=needs,
        stdin_secret=secret,
        files=(lock,),
        container=vmid,
        hub=HubFiles(spec.repo, spec.revision, download.directory, vmid),
        undoes=(f"weights of {spec.repo} in {download.directory} on {where} "
                + ("deleted (deleteOnDestroy)" if spec.delete_on_destroy else "kept (deleteOnDestroy is false)")
                + "; the download tools removed with the last download"),
    )


# How many weight files the deep check reads at once: each is one sha256sum, bound by the disk more than a core.
DEEP_PARALLEL = 4


def deep_facts(hub: HubFiles, listing: list[dict]) -> list[Fact]:
    """Every file of the Hub's listing (GET /api/models/{repo}/tree/{revision}: huggingface_hub `list_repo_tree`)
    read whole where the download keeps it, as the Hub has it: an LFS file (the weights) by its full sha256 and
    size against the listing's `lfs.oid` and `lfs.size`, any other file by its git blob id against `oid`. One
    byte changed anywhere in a shard shows, naming the file; the refresh's sampled digest may miss it."""
    files = [entry for entry in listing if entry.get("type") == "file"]
    lfs = [entry["path"] for entry in files if entry.get("lfs")]
    directory = shlex.quote(hub.directory)
    setup = (render("model_download/model-files.sh.j2").rstrip("\n"),
             render("model_download/model-deep-check.sh.j2", directory=hub.directory, lfs_paths=lfs,
                    parallel=DEEP_PARALLEL).rstrip("\n"))
    facts = []
    for entry in files:
        path = shlex.quote(entry["path"])
        if entry.get("lfs"):
            facts.append(Fact(f"Hub sha256 of {entry['path']}", f"deep_lfs_state {directory} {path}",
                              f"sha256:{entry['lfs']['oid']} size:{entry['lfs']['size']}", setup))
        else:
            facts.append(Fact(f"Hub blob of {entry['path']}", f"deep_blob_state {directory} {path}",
                              f"blob:{entry['oid']} size:{entry['size']}", setup))
    return facts


def deep_probe(unit: Unit, listing: list[dict]) -> tuple[str, dict[str, str]]:
    """The deep check's probe of a download and the facts the Hub's listing says it must print."""
    facts = deep_facts(unit.hub, listing)
    return probe_in(unit.key, unit.hub.container, facts), desired(facts)


def model_store_key(vmid: int) -> str:
    return f"ct{vmid}-model-store"


def plan_model_store(container: ContainerConfig, needs: tuple[str, ...]) -> Unit:
    store = container.model_store
    # pct's mount point entry `mpN: SOURCE,mp=PATH` is a property string: split at every ',' with no quoting, and
    # a part holding '=' read as key=value (pve-common src/PVE/JSONSchema.pm parse_property_string), so those
    # characters cannot reach pct; blanks and the rest are taken as they are.
    for field, value, refused in (("hostPath", store.host_path, ",="), ("path", store.path, ",")):
        for char in refused:
            if char in value:
                raise ValueError(f"containers (vmid {container.vmid}): modelStore.{field} {value!r} holds {char!r}, "
                                 "which pct's mount point entry cannot hold (it splits at ',' and reads '=' as an "
                                 "option); use a directory without it")
    unit = model_store_key(container.vmid)
    values = dict(unit=unit, vmid=container.vmid, allow_restart=container.allow_restart, host_path=store.host_path,
                  path=store.path)
    facts = [Fact(f"mount {store.path}", "model_store_mount", f"{store.host_path} at {store.path}")]
    return Unit(
        key=unit,
        kind="ModelStore",
        ensure=render("model_download/model-store.sh.j2", **values),
        teardown=render("model_download/model-store-teardown.sh.j2", **values),
        probe=probe_in(unit, None, facts, prelude=render("model_download/model-store-probe.sh.j2", **values)),
        desired=desired(facts),
        needs=needs,
        undoes=(f"mount point of {store.host_path} removed from CT {container.vmid} (at its next restart); "
                f"{store.host_path} and the weights in it kept on the host"),
        restarts=container.vmid,
        restart_allowed=container.allow_restart,
    )
