"""HiddenStateServer: the verifier in vLLM on the server's GPUs, extracting the hidden states the trainer reads.

speculators' scripts/launch_vllm.py starts it with the vLLM environment's Python (its driver,
gpuhosts/engines/speculators.py, knows the launch); the flags of `vllm serve` after `--` are the vLLM driver's
(gpuhosts/engines/vllm.py). The unit also ships the hidden-state check (gpuhosts/hostside/hidden_state_check.py),
which the check after the start (gpuhosts/plans/hidden_state_gate.py) and the training's launch script run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuhosts.engines import DRIVERS
from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.engines.vllm import VllmDriver
from gpuhosts.envspec import EnvSpec
from gpuhosts.hostside import hidden_state_check
from gpuhosts.paths import LIB_DIR
from gpuhosts.plans.node_units import service_unit
from gpuhosts.render import HostFile, render
from gpuhosts.training import LayerIds, TrainerStack
from gpuhosts.units import Unit

KEY = "hidden-state-server"
SERVER_UNIT = "gpuhosts-hidden-state-server.service"
CHECK_SCRIPT = f"{LIB_DIR}/check-hidden-states.py"


@dataclass(frozen=True)
class HiddenStateServer:
    unit: Unit
    url: str
    states_dir: str
    environment: dict[str, str]
    # launch_vllm.py as the unit starts it, and the `vllm serve` it starts in turn.
    launch: speculators_driver.Invocation
    served: speculators_driver.Invocation


def plan_hidden_state_server(stack: TrainerStack, ids: LayerIds, speculators: EnvSpec, vllm_env: EnvSpec,
                             needs: tuple[str, ...]) -> HiddenStateServer:
    training, server = stack.training, stack.training.server
    vllm = DRIVERS[VllmDriver.name]
    verifier_dir = stack.model_dir(training.verifier)
    states_dir = f"{stack.storage}/hidden_states"
    environment = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, server.gpus)),
                   "HF_HUB_OFFLINE": "1",
                   # launch_vllm.py starts `vllm serve`: the vLLM environment's bin comes first.
                   "PATH": f"{vllm_env.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    vllm_args = vllm.hidden_state_server_args(training.vllm, server)
    launch = speculators_driver.launch(training.speculators.version, vllm_env.venv, speculators.checkout,
                                       verifier_dir, states_dir, ids.trainer, vllm_args, environment)
    served = speculators_driver.Invocation(
        "vllm-serve", vllm.package, training.vllm.version, "vllm serve",
        (vllm_env.interpreter, "-m", "vllm.entrypoints.cli.main", "serve"),
        tuple(speculators_driver.served_vllm_argv(verifier_dir, states_dir, ids.server, vllm_args)), environment)
    unit_file = HostFile(f"/etc/systemd/system/{SERVER_UNIT}", render(
        "hidden_state_server/server.service.j2", vllm_version=training.vllm.version, gpus=server.gpus, ids=ids,
        verifier_repo=training.verifier.repo, workdir=speculators.checkout,
        environment=dict(sorted(environment.items())), argv=launch.words))
    check_script = HostFile(CHECK_SCRIPT, render("hidden_state_server/check-hidden-states.py.j2", path=CHECK_SCRIPT,
                                                 source=Path(hidden_state_check.__file__).read_text().rstrip("\n")),
                            "0755")
    files = [unit_file, check_script]
    unit = service_unit(
        KEY, "HiddenStateServer", SERVER_UNIT, files,
        render("common/node-unit.sh.j2", unit=KEY, unit_name=SERVER_UNIT,
               summary=f"The hidden-state server on GPUs {list(server.gpus)}.", files=files,
               needs=[launch.command[1], f"{verifier_dir}/.gpuhosts-download"], secret_file=None),
        render("common/node-unit-teardown.sh.j2", unit=KEY, unit_name=SERVER_UNIT,
               keeps="the hidden states it cached are the training's to delete.",
               remove=[unit_file.path, check_script.path], delete_dirs=[]),
        needs, keeps=f"hidden states in {states_dir} kept; verifier weights kept by their own unit")
    return HiddenStateServer(unit=unit, url=f"http://127.0.0.1:{server.port}", states_dir=states_dir,
                             environment=environment, launch=launch, served=served)
