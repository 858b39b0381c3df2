"""A multi-node training run (`gpuhosts:multiNode`), planned and checked: what each node would run, not units.

Every node runs the same two things the converged node does: a hidden-state server on `training.server.gpus`,
read only by the trainer's workers of its own node (`--vllm-endpoint` on 127.0.0.1: hidden states are large, and
each node then extracts its own share), and torchrun's workers on `training.trainingGpus`, which meet through the
c10d store the first node (gpuhosts:node) hosts at the rendezvous endpoint. The trainer's words are the converged
node's (gpuhosts/plans/training_job.py), its launcher rewritten by the speculators driver (`across_nodes`).
`make verify-torchrun` parses each node's command line with torchrun's own parser.
"""

from __future__ import annotations

from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.training import TrainerStack


def plan_multi_node(stack: TrainerStack, trainer: speculators_driver.Invocation, server_url: str) -> dict:
    """Per node, in rendezvous order of the stack (the first hosts the store): where it is, its hidden-state
    server and its torchrun command line."""
    multi, training = stack.multi_node, stack.training
    nodes = (stack.node, *multi.nodes)
    endpoint = f"{multi.rendezvous.host or stack.node.ssh.host}:{multi.rendezvous.port}"
    nproc = len(training.training_gpus)
    launch = speculators_driver.across_nodes(trainer, len(nodes), nproc, endpoint, multi.rendezvous.id)
    return {
        "nnodes": len(nodes), "nprocPerNode": nproc, "worldSize": len(nodes) * nproc,
        "rendezvous": {"backend": "c10d", "endpoint": endpoint, "id": multi.rendezvous.id,
                       "storeOn": stack.node.name},
        "nodes": [{"name": node.name, "address": node.ssh.host, "converged": index == 0,
                   "server": {"gpus": list(training.server.gpus), "url": server_url},
                   "trainingGpus": list(training.training_gpus), "argv": launch.words}
                  for index, node in enumerate(nodes)],
    }
