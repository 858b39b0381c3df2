"""Operator mistakes in copies of the committed kpro5 and trainer stack files, as data: where the value goes (a path
into the stack's `gpuhosts:` values; a missing last key is added, `DELETE` removes it), the value, and the field the
refusal must name. tests/test_operator_mistakes.py runs each through the validation `gpuhosts plan` and the program
share. Each row is a slip a person makes: a typo, a unit, a quoted number, a value from another field, a shape."""

from __future__ import annotations

class _Delete:
    """The value of a row that removes its key; its name is stable, as pytest-xdist's workers must agree on ids."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
K, T = "kpro5", "trainer"
S0, S1 = ("services", 0), ("services", 1)
TR = ("training",)

MISTAKES = [
    # --- gpuhosts:kind and sections
    (K, ("kind",), "proxmoxx", "gpuhosts:kind"),
    (K, ("kind",), "trainer", "gpuhosts:kind"),
    (T, ("kind",), "proxmox", "gpuhosts:kind"),
    (K, ("hots",), [], "gpuhosts:hots"),
    (K, ("service",), [], "gpuhosts:service"),
    (T, ("trainng",), {}, "gpuhosts:trainng"),
    (K, ("host",), DELETE, "gpuhosts:host"),
    (K, ("gpus",), [], "gpuhosts:gpus"),
    (K, ("gpus",), {"address": "0000:01:00.0"}, "gpuhosts:gpus"),
    (K, ("llmApiKey",), "sk-plain-text-key", "gpuhosts:llmApiKey"),
    (K, ("hfToken",), "hf_plaintext", "gpuhosts:hfToken"),
    # --- the host
    (K, ("host", "name"), "", "gpuhosts:host.name"),
    (K, ("host", "name"), "kpro 5", "gpuhosts:host.name"),
    (K, ("host", "ssh", "host"), "root@10.20.0.15", "gpuhosts:host.ssh.host"),
    (K, ("host", "ssh", "host"), "10.20.0.256", "gpuhosts:host.ssh.host"),
    (K, ("host", "ssh", "host"), "10.20.0.15", "gpuhosts:host.ssh.hostKey"),
    (K, ("host", "ssh", "port"), 0, "gpuhosts:host.ssh.port"),
    (K, ("host", "ssh", "port"), "22/tcp", "gpuhosts:host.ssh.port"),
    (K, ("host", "ssh", "port"), 70000, "gpuhosts:host.ssh.port"),
    (K, ("host", "ssh", "user"), "root user", "gpuhosts:host.ssh.user"),
    (K, ("host", "ssh", "hostKey"), DELETE, "gpuhosts:host.ssh.hostKey"),
    (K, ("host", "ssh", "hostKey"), "AAAAC3NzaC1lZDI1NTE5AAAAICsXHjlWhs3f2mkHV9MvWFYYsUeqST3abeFnm", "gpuhosts:host.ssh.hostKey"),
    (K, ("host", "ssh", "insecureIgnoreHostKey"), True, "gpuhosts:host.ssh.insecureIgnoreHostKey"),
    (K, ("host", "ssh", "passwd"), "hunter2", "gpuhosts:host.ssh.passwd"),
    (K, ("host", "bootloader"), "systemdboot", "gpuhosts:host.bootloader"),
    (K, ("host", "bootloader"), "lilo", "gpuhosts:host.bootloader"),
    (K, ("host", "kernelArgs"), "iommu=pt", "gpuhosts:host.kernelArgs"),
    (K, ("host", "allowReboot"), "perhaps", "gpuhosts:host.allowReboot"),
    (K, ("host", "allowReboots"), True, "gpuhosts:host.allowReboots"),
    # --- the driver
    (K, ("nvidia", "version"), 580.126, "gpuhosts:nvidia.version"),
    (K, ("nvidia", "version"), "580", "gpuhosts:nvidia.version"),
    (K, ("nvidia", "version"), "latest", "gpuhosts:nvidia.version"),
    (K, ("nvidia", "sha256"), "5d3fbb2b", "gpuhosts:nvidia.sha256"),
    (K, ("nvidia", "sha256"), "5D3FBB2B2A2BD9B3D0A6C3A9B1BD8E1F8B7AD0B7E0B1C3F6F1F1C8D5A9E6B7C4", "gpuhosts:nvidia.sha256"),
    (K, ("nvidia", "kernelModuleType"), "opensource", "gpuhosts:nvidia.kernelModuleType"),
    (K, ("nvidia", "url"), "ftp://example.com/NVIDIA.run", "gpuhosts:nvidia.url"),
    (K, ("nvidia",), DELETE, "gpuhosts:nvidia"),
    # --- the GPUs
    (K, ("gpus", 0, "address"), "01:00", "gpuhosts:gpus[0].address"),
    (K, ("gpus", 0, "address"), "0000:01:00.1", "gpuhosts:gpus[0].address"),
    (K, ("gpus", 0, "address"), "0000:21:00.0", "gpuhosts:gpus[1].address"),
    (K, ("gpus", 0, "use"), "VFIO", "gpuhosts:gpus[0].use"),
    (K, ("gpus", 0, "use"), "passthrough", "gpuhosts:gpus[0].use"),
    (K, ("gpus", 2, "use"), "containr", "gpuhosts:gpus[2].use"),
    (K, ("gpus", 2, "container"), "ct129", "gpuhosts:gpus[2].container"),
    (K, ("gpus", 2, "container"), 130, "gpuhosts:gpus[2].container"),
    (K, ("gpus", 2, "container"), DELETE, "gpuhosts:gpus[2].container"),
    (K, ("gpus", 0, "container"), 129, "gpuhosts:gpus[0].container"),
    (K, ("gpus", 0, "model"), "", "gpuhosts:gpus[0].model"),
    # --- the containers
    (K, ("containers", 0, "vmid"), "129a", "gpuhosts:containers[0].vmid"),
    (K, ("containers", 0, "vmid"), 42, "gpuhosts:containers[0].vmid"),
    (K, ("containers", 0, "hostname"), "llm_box", "gpuhosts:containers[0].hostname"),
    (K, ("containers", 0, "vmId"), 129, "gpuhosts:containers[0].vmId"),
    # --- the services
    (K, (*S0, "name"), "Qwen SGLang", "gpuhosts:services[0].name"),
    (K, (*S0, "name"), "qwen-vllm-dflash", "gpuhosts:services[1].name"),
    (K, (*S0, "container"), 130, "gpuhosts:services[0].container"),
    (K, (*S0, "engine", "name"), "SGLang", "gpuhosts:services[0].engine.name"),
    (K, (*S0, "engine", "name"), "tgi", "gpuhosts:services[0].engine.name"),
    (K, (*S0, "engine", "version"), 0.5, "gpuhosts:services[0].engine.version"),
    (K, (*S0, "engine", "version"), "0.5.9", "gpuhosts:services[0].engine.version"),
    (K, (*S0, "model", "repo"), "Qwen3.6-27B", "gpuhosts:services[0].model.repo"),
    (K, (*S0, "model", "localDir"), "srv/models/Qwen3.6-27B", "gpuhosts:services[0].model.localDir"),
    (K, (*S0, "model", "localDir"), "/etc", "gpuhosts:services[0].model.localDir"),
    (K, (*S0, "model", "localDir"), "/srv/models/../etc", "gpuhosts:services[0].model.localDir"),
    (K, (*S0, "tensorParallelSize"), 0, "gpuhosts:services[0].tensorParallelSize"),
    (K, (*S0, "tensorParallelSize"), 4, "gpuhosts:services[0].tensorParallelSize"),
    (K, (*S0, "gpus"), ["0000:01:00.0", "0000:61:00.0"], "gpuhosts:services[0].gpus[0]"),
    (K, (*S0, "gpus"), "0000:41:00.0", "gpuhosts:services[0].gpus"),
    (K, (*S0, "port"), 70000, "gpuhosts:services[0].port"),
    (K, (*S0, "port"), "30000/tcp", "gpuhosts:services[0].port"),
    (K, (*S0, "bind"), "localhost", "gpuhosts:services[0].bind"),
    (K, (*S0, "bind"), "0.0.0.0:30000", "gpuhosts:services[0].bind"),
    (K, (*S0, "contextLength"), 1000000, "gpuhosts:services[0].contextLength"),
    (K, (*S0, "contextLength"), 100, "gpuhosts:services[0].contextLength"),
    (K, (*S0, "memFraction"), 1.5, "gpuhosts:services[0].memFraction"),
    (K, (*S0, "memFraction"), "80%", "gpuhosts:services[0].memFraction"),
    (K, (*S0, "speculative", "method"), "eagle4", "gpuhosts:services[0].speculative.method"),
    (K, (*S0, "speculative", "numSteps"), -1, "gpuhosts:services[0].speculative.numSteps"),
    (K, (*S0, "apiKeySecret"), "llmApiKy", "gpuhosts:services[0].apiKeySecret"),
    (K, (*S0, "extraArgs"), ["--port", "8001"], "gpuhosts:services[0].extraArgs"),
    (K, (*S0, "extraArgs"), ["--api-key", "sk-in-the-argv"], "gpuhosts:services[0].extraArgs"),
    (K, (*S0, "extraArgs"), "--enable-torch-compile", "gpuhosts:services[0].extraArgs"),
    (K, (*S0, "environment"), {"HF_TOKEN": "hf_x"}, "gpuhosts:services[0].environment"),
    (K, (*S0, "environment"), {"2BAD": "x"}, "gpuhosts:services[0].environment"),
    (K, (*S0, "gate", "minAcceptanceLength"), "high", "gpuhosts:services[0].gate.minAcceptanceLength"),
    (K, (*S0, "gate", "minDecodeTokensPerS"), -5, "gpuhosts:services[0].gate.minDecodeTokensPerS"),
    (K, (*S0, "reasoningParser"), "qwen 3", "gpuhosts:services[0].reasoningParser"),
    (K, (*S0, "python"), 3.12, "gpuhosts:services[0].python"),
    (K, (*S0, "python"), "3.1x", "gpuhosts:services[0].python"),
    (K, (*S0, "enabled"), "yes please", "gpuhosts:services[0].enabled"),
    (K, (*S1, "sharesWith"), ["qwen-sglng"], "gpuhosts:services[1].sharesWith"),
    (K, (*S1, "sharesWith"), [], "gpuhosts:services[1].gpus"),
    (K, (*S1, "sharesWith"), DELETE, "gpuhosts:services[1].gpus"),
    (K, (*S1, "speculative", "drafter", "repo"), "z-lab Qwen3.6-27B-DFlash", "gpuhosts:services[1].speculative.drafter.repo"),
    # --- the training node
    (T, ("node", "ssh", "host"), "root@10.20.0.40", "gpuhosts:node.ssh.host"),
    (T, ("node", "ssh", "host"), "10.20.0.40", "gpuhosts:node.ssh.hostKey"),
    (T, ("node", "gpus", "count"), 0, "gpuhosts:node.gpus.count"),
    (T, ("node", "gpus", "count"), "eight", "gpuhosts:node.gpus.count"),
    (T, ("node", "driverVersion"), 580.126, "gpuhosts:node.driverVersion"),
    (T, ("node", "storage"), "data", "gpuhosts:node.storage"),
    (T, (*TR, "server", "gpus"), [0, 1, 2, 9], "gpuhosts:training.server.gpus"),
    (T, (*TR, "server", "tensorParallelSize"), 3, "gpuhosts:training.server.tensorParallelSize"),
    (T, (*TR, "server", "maxModelLen"), 1048576, "gpuhosts:training.server.maxModelLen"),
    (T, (*TR, "server", "maxModelLen"), 4096, "gpuhosts:training.server.maxModelLen"),
    (T, (*TR, "trainingGpus"), [3, 4, 5, 6], "gpuhosts:training.trainingGpus"),
    (T, (*TR, "trainingGpus"), [4, 4, 5, 6], "gpuhosts:training.trainingGpus"),
    (T, (*TR, "hyper", "epochs"), 0, "gpuhosts:training.hyper.epochs"),
    (T, (*TR, "hyper", "lr"), "3e-4x", "gpuhosts:training.hyper.lr"),
    (T, (*TR, "hyper", "numLayers"), 4, "gpuhosts:training"),
    (T, (*TR, "dataset", "name"), "Qwen Mix!", "gpuhosts:training.dataset.name"),
    (T, (*TR, "dataset", "mix", 0, "count"), -1, "gpuhosts:training.dataset.mix[0].count"),
    (T, (*TR, "dataset", "mix", 0, "converter"), "orca2", "gpuhosts:training.dataset.mix[0].converter"),
    (T, (*TR, "dataset", "mix", 0, "revision"), "main branch", "gpuhosts:training.dataset.mix[0].revision"),
    (T, (*TR, "monitor", "bind"), "0.0.0.0", "gpuhosts:training.monitor.tokenSecret"),
    (T, (*TR, "monitor", "port"), 8000, "gpuhosts:training.monitor.port"),
    (T, (*TR, "speculators", "version"), "0.4.1", "gpuhosts:training.speculators.version"),
    (T, (*TR, "vllm", "version"), "0.20.1", "gpuhosts:training.vllm.version"),
]
