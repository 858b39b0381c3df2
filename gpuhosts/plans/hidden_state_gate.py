"""HiddenStateCheck: after the hidden-state server (re)starts, one short request makes it write a sample's states,
and the shipped check refuses them when any layer the server extracts is all zero or not finite (vLLM before #46301
extracts zeros from hybrid verifiers, silently).
The training's launch script runs the same probe before torchrun starts."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass

from gpuhosts.envspec import EnvSpec
from gpuhosts.facts import Fact
from gpuhosts.plans.hidden_state_server import CHECK_SCRIPT, HiddenStateServer
from gpuhosts.plans.node_units import check_unit
from gpuhosts.render import render
from gpuhosts.training import LayerIds, TrainerStack
from gpuhosts.units import Unit

KEY = "hidden-state-check"
PROBE_PROMPT = "Explain in one sentence why the sky is blue."
READY_TIMEOUT_S = 1800
# How long the check waits for vLLM's writer to release a probe's <file>.lock after the response.
WRITE_TIMEOUT_S = 120


@dataclass(frozen=True)
class StateProbe:
    """What a script needs to wait for the server and check the states of one probe request."""

    server_url: str
    states_dir: str
    python: str
    probe_request: str
    # The layer ids the server extracts, in its order (LayerIds.server): one slice each in the file it writes.
    layers: str = ""
    check_script: str = CHECK_SCRIPT
    ready_timeout_s: int = READY_TIMEOUT_S
    write_timeout_s: int = WRITE_TIMEOUT_S

    def values(self) -> dict:
        return asdict(self)


def state_probe(stack: TrainerStack, server: HiddenStateServer, vllm_env: EnvSpec, ids: LayerIds) -> StateProbe:
    request = {"model": stack.model_dir(stack.training.verifier), "prompt": PROBE_PROMPT, "max_tokens": 1}
    return StateProbe(server_url=server.url, states_dir=server.states_dir, python=vllm_env.interpreter,
                      probe_request=json.dumps(request), layers=",".join(map(str, ids.server)))


def plan_hidden_state_check(server: HiddenStateServer, probe: StateProbe) -> Unit:
    """The server's digest is part of the script, so a changed server is checked again and an unchanged one not."""
    return check_unit(KEY, "HiddenStateCheck",
                      render("hidden_state_gate/hidden-state-check.sh.j2", unit=KEY, server_digest=server.unit.digest,
                             **probe.values()),
                      render("common/nothing.sh.j2", unit=KEY, reason="it only checks"), (server.unit.key,),
                      [health_fact(probe.server_url)])


def health_fact(server_url: str) -> Fact:
    """What a refresh reads again of the check: the server it checked still answers /health (the states it
    extracts need a request, which only the check itself makes)."""
    health = shlex.quote(f"{server_url}/health")
    return Fact(f"health {server_url}",
                f'code="$(curl -sS -o /dev/null -m 10 -w "%{{http_code}}" {health})"; '
                f'if [ "$code" = 200 ]; then echo answers; elif [ "$code" = 000 ]; then echo unreachable; '
                f'else echo "answered $code"; fi', "answers")
