"""ModelDownload: a model's weights (`hf download`) in its container, resumable, skipped when complete, kept on destroy.

One download per directory, shared by the services that name it. A gated repository gets the Hugging Face token
(`gpuhosts:hfToken`) through the command's stdin; inside the container it exists only as a 0600 file while `hf`
runs. After a download the weights' config.json is checked against what the plan derived from the model table
(the target's layer count, a DFlash drafter's `target_layer_ids` and sliding-window layers).
With `weightsOn: host` the directory lies on host storage that ModelStore bind-mounts into the container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_command import remote

from components._command import step_command
from components.drafter_config import target_layer_ids
from components.inference_service import SERVICE_ROOT
from components.python_env import in_container
from gpuhosts.compat import model_facts
from gpuhosts.config import ContainerConfig
from gpuhosts.render import Step, render
from gpuhosts.services import DrafterSpec, ModelSpec, ServiceConfig, SpecMethod, WeightsOn

HF_TOKEN = "hfToken"


@dataclass(frozen=True)
class Download:
    """One directory of weights in a container and the services that use it."""

    spec: ModelSpec
    services: tuple[str, ...]
    env: str  # the uv environment whose `hf` and Python do the work
    store: str | None
    check: dict[str, Any]
    path: str = ""

    @property
    def directory(self) -> str:
        return self.path or self.spec.path

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
            store = container.model_store.path if service.weights_on is WeightsOn.HOST and container.model_store else None
            known = found.get(spec.path)
            if known is None:
                found[spec.path] = Download(spec, (service.name,), service.name, store, _check(service, spec))
            else:
                found[spec.path] = Download(known.spec, known.services + (service.name,), known.env, known.store,
                                            {**known.check, **_check(service, spec)})
    return list(found.values())


def download_slug(download: Download) -> str:
    return download.directory.rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-").replace(".", "-")


def plan_model_download(host: str, vmid: int | None, download: Download) -> Step:
    spec = download.spec
    unit = (f"ct{vmid}-" if vmid is not None else "") + f"model-{download_slug(download)}"
    venv = f"{SERVICE_ROOT}/{download.env}/venv"
    secret = HF_TOKEN if download.gated else None
    values = dict(unit=unit, vmid=vmid, repo=spec.repo, revision=spec.revision, local_dir=download.directory,
                  hf=f"{venv}/bin/hf", python=f"{venv}/bin/python", secret=secret, store=download.store,
                  check=download.check, delete=spec.delete_on_destroy)
    return Step(
        name=f"{host}-{unit}",
        create=in_container(unit, vmid, render("container_services/model-download.sh.j2", **values), secret=secret),
        delete=in_container(unit, vmid, render("container_services/model-download-teardown.sh.j2", **values),
                            teardown=True),
        stdin_secret=secret,
    )


def plan_model_store(host: str, container: ContainerConfig) -> Step:
    store = container.model_store
    unit = f"ct{container.vmid}-model-store"
    values = dict(unit=unit, vmid=container.vmid, allow_restart=container.allow_restart, host_path=store.host_path,
                  path=store.path)
    return Step(
        name=f"{host}-{unit}",
        create=render("container_services/model-store.sh.j2", **values),
        delete=render("container_services/model-store-teardown.sh.j2", **values),
    )


class ModelDownload(pulumi.ComponentResource):
    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs, token: pulumi.Input[str] | None,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:service:ModelDownload", name, None, opts)
        self.command = step_command(step, connection, self, depends_on or [], stdin=token)
        self.register_outputs({"stdout": self.command.stdout})


class ModelStore(pulumi.ComponentResource):
    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:service:ModelStore", name, None, opts)
        self.command = step_command(step, connection, self, depends_on or [])
        self.register_outputs({"stdout": self.command.stdout})
