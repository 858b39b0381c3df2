"""`make lifecycle`: the kpro5 stack's whole lifecycle and its faults on the simulated host over SSH, with figures.

Runs what tests/test_lifecycle.py and tests/lifecycle/ check, once, and prints how it went. A converge is the
program run that writes the plan (`gpuhosts plan`) plus applying it; the last line is

    lifecycle: converge1=<s>s converge2=<s>s commands1=<n> commands2=<n> writes2=<n> faults=<survived>/<injected> refused=<refused>/<tried>

and the lines before it give the same figures for the inference services of container 129 (`services: …`) and for
the training node (`trainer: …`).

writes2 counts the commands of the second converge whose output ends in `done: changed` (target 0).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main(argv: list[str] | None = None) -> int:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from sshhost.bed import Bed, moved_to_vfio
    from sshhost.executor import ApplyError, CommandFailed, HostUnreachable
    from sshhost.ladder import DROPS, HALF_WAY, ORDER, bed_before, build_ladder, drop

    root = Path(tempfile.mkdtemp(prefix="gpuhosts-lifecycle-"))
    failures: list[str] = []

    def check(ok: bool, what: str) -> bool:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failures.append(what)
        return ok

    try:
        # --- lifecycle ----------------------------------------------------------------------------------------
        print("lifecycle of kpro5 over SSH")
        ladder = build_ladder(root / "ladder")
        bed = Bed.seed(root / "main", ladder.bed.run_file, ladder.bed.sha256)
        start = bed.digest()
        began = time.monotonic()
        plan = bed.plan()
        runs1 = bed.up(plan=plan)
        converge1 = time.monotonic() - began
        check(bed.problems() == [], f"up from the seed: {len(runs1)} commands, host in the declared state")
        began = time.monotonic()
        plan2 = bed.plan()
        runs2 = bed.up(plan=plan2)
        converge2 = time.monotonic() - began
        writes2 = sum(r.changed for r in runs2)
        check(not runs2, f"up again: {len(runs2)} commands")
        after = bed.digest()
        by_hand = [bed.on_host(script) for _name, script in bed.ensure_scripts(plan2)]
        check(all(r.returncode == 0 and r.stdout.rstrip().endswith("done: no change") for r in by_hand)
              and bed.digest() == after, "every ensure script run again by hand: no change")
        values = moved_to_vfio(bed.values())
        changed = bed.up(values)
        check(bed.problems(values) == [] and "kpro5-nvidia-uvm-at-boot" not in [r.name for r in changed],
              f"A6000 to vfio: ran {', '.join(r.name for r in changed)}; host in the new state")
        model = bed.tree / "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json"
        model.parent.mkdir(parents=True)
        model.write_text('{"num_hidden_layers": 64}\n')
        bed.destroy()
        kept = model.read_text() == '{"num_hidden_layers": 64}\n'
        shutil.rmtree(model.parent)
        check(kept and bed.digest() == start, "destroy: tree digest back to the start, model directory kept")
        bed.close()

        # --- faults -----------------------------------------------------------------------------------------------
        print("faults")
        injected = survived = 0
        for how in DROPS:
            for index, name in enumerate(ORDER):
                fbed = bed_before(ladder, index, root / f"drop-{how}-{index}")
                fault = drop(fbed, how, ladder.seconds[index])
                injected += 1
                try:
                    fbed.up(plan=ladder.plan, fault=fault)
                except ApplyError:
                    pass
                fbed.ssh.wait_idle()
                ok = fault.fired and _converges(fbed, ladder.plan)
                survived += ok
                check(ok, f"connection dropped ({how}) in {name}: next up converges")
                fbed.close()
        for command, when, skip, message, unit in HALF_WAY:
            fbed = bed_before(ladder, ORDER.index(unit), root / f"half-{command}")
            fbed.ssh.fail_once(command, message, when=when, skip=skip)
            injected += 1
            try:
                fbed.up(plan=ladder.plan)
            except CommandFailed:
                pass
            ok = _converges(fbed, ladder.plan) and fbed.digest() == ladder.converged
            survived += ok
            check(ok, f"{command} failing half-way in {unit}: next up repairs it")
            fbed.close()
        fbed = bed_before(ladder, ORDER.index("kpro5-nvidia-driver"), root / "drop-after-apt-get")
        fbed.ssh.drop_after("apt-get", "install *")
        injected += 1
        try:
            fbed.up(plan=ladder.plan)
        except ApplyError:
            pass
        ok = _converges(fbed, ladder.plan)
        survived += ok
        check(ok, "connection dropped right after apt-get in kpro5-nvidia-driver: next up converges")
        fbed.destroy()
        check(fbed.digest() == ladder.start, "destroy after that drop restores the start (packages recorded before apt-get)")
        fbed.close()

        unreachable = Bed.copy_of(ladder.bed, root / "unreachable")
        unreachable.ssh.stop()
        try:
            unreachable.destroy()
            message = ""
        except HostUnreachable as error:
            message = str(error)
        check("pulumi destroy --continue-on-error" in message and "pulumi stack rm" in message,
              "destroy of an unreachable host names `pulumi destroy --continue-on-error` and `pulumi stack rm`")

        # --- bad host states ----------------------------------------------------------------------------------
        print("bad host states")
        tried = refused = 0

        def refuses(rbed: Bed, words: str, values=None, **options) -> None:
            nonlocal tried, refused
            tried += 1
            before, state = rbed.digest(), rbed.executor.state()
            try:
                rbed.up(values, **options)
                text = ""
            except CommandFailed as error:
                text = str(error)
            ok = "refused:" in text and words in text and rbed.digest() == before and rbed.executor.state() == state
            refused += ok
            check(ok, f"refused, host unchanged: {words}")
            rbed.close()

        vm = Bed.seed(root / "bad-vm", ladder.bed.run_file, ladder.bed.sha256,
                      vms=((101, "win-3090", "0000:01:00", True), (103, "a6000-vm", "0000:41:00", True)))
        refuses(vm, "VM 103 is running with 0000:41:00 passed through")

        pm = Bed.copy_of(ladder.bed, root / "bad-persistence")
        pm.keep_persistence_on("0000:61:00.0")
        refuses(pm, "persistence mode holds GPU 0000:61:00.0", moved_to_vfio(pm.values()))

        us = Bed.copy_of(ladder.bed, root / "bad-userspace")
        older = us.values()
        older["nvidia"]["version"] = "570.148.08"
        refuses(us, "Driver/library version mismatch", older, targets=["kpro5-ct129-nvidia-userspace"])

        uvm = Bed.copy_of(ladder.bed, root / "bad-uvm")
        uvm.on_host("modprobe -r nvidia_uvm")
        refuses(uvm, "/dev/nvidia-uvm is missing", moved_to_vfio(uvm.values()), targets=["kpro5-ct129-gpu-devices"])

        # --- inference services -------------------------------------------------------------------------------
        print("inference services in CT 129 (the gate measures an engine stand-in)")
        services = _services(Bed.copy_of(ladder.bed, root / "services"), check)
        ladder.bed.close()

        # --- the training node --------------------------------------------------------------------------------
        print("training node (a simulated node; the hidden-state server is a stand-in)")
        trainer = _trainer(root / "trainer", check)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"converge = gpuhosts plan + apply; first: {len(runs1)} commands, second: {len(runs2)}")
    if failures:
        print(f"{len(failures)} check(s) failed: " + "; ".join(failures))
    print("services: " + " ".join(f"{k}={v}" for k, v in services.items()))
    print("trainer: " + " ".join(f"{k}={v}" for k, v in trainer.items()))
    print(f"lifecycle: converge1={converge1:.1f}s converge2={converge2:.1f}s commands1={len(runs1)} "
          f"commands2={len(runs2)} writes2={writes2} faults={survived}/{injected} refused={refused}/{tried}")
    return 1 if failures else 0


def _services(bed, check) -> dict:
    """Up with kpro5's services, up again, destroy; figures for the summary line."""
    from components.deploy_gate import parse_gate_output
    from engine_standin import Engine, start_engine
    from sshhost import free_port
    from sshhost.bed import SECRETS

    ports = free_port(), free_port()
    engine = start_engine(Engine(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"]), ports[0])
    try:
        values = bed.services_values(*ports)
        began = time.monotonic()
        first = bed.up(values)
        converge1 = time.monotonic() - began
        gate = parse_gate_output(first[-1].stdout) if first else None
        check(bool(gate and gate["passed"]), f"up: {len(first)} commands, deploy gate passed")
        began = time.monotonic()
        second = bed.up(values)
        converge2 = time.monotonic() - began
        check(second == [], f"up again: {len(second)} commands")
        bed.destroy()
        log = bed.executor.log_file.read_bytes() + bed.executor.state_file.read_bytes()
        leaks = sum(value.encode() in log for value in SECRETS.values())
        check(leaks == 0, "no secret value in the command log or the state")
        kept = (bed.tree / "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json").exists()
        check(kept, "destroy kept the downloaded weights")
    finally:
        engine.shutdown()
        engine.server_close()
        bed.close()
    return {"converge1": f"{converge1:.1f}s", "converge2": f"{converge2:.1f}s", "commands1": len(first),
            "commands2": len(second), "gate": "passed" if gate and gate["passed"] else "failed",
            "acceptance": f"{gate['acceptance_length']:.2f}" if gate else "-", "leaks": leaks, "weightsKept": kept}


def _trainer(root: Path, check) -> dict:
    """The trainer stack over SSH on a simulated node: up, up again, destroy; figures for the summary line."""
    import yaml
    from sshhost import SshHost
    from sshhost.executor import Executor, Target, write_plan
    from trainer_node import StateServer, node_values, prepare_node

    root.mkdir(parents=True)
    tree = prepare_node(root)
    ssh = SshHost(tree, root / "ssh").start()
    token = "hf_LifecycleTrainerToken"
    try:
        values = node_values(root)
        values["node"]["ssh"].update(host=ssh.host, port=ssh.port, user=ssh.user, hostKey=ssh.host_key)
        stack_file = root / "Pulumi.trainer.yaml"
        stack_file.write_text(yaml.safe_dump({"config": {f"gpuhosts:{k}": v for k, v in values.items()}}))
        executor = Executor(Target.from_stack_file(stack_file, ssh.private_key, root / "client"), root / "state.json",
                            root / "commands.log", secrets={"hfToken": token})
        server = StateServer(tree / "data/hidden_states", values["training"]["server"]["port"])
        try:
            began = time.monotonic()
            first = executor.up(write_plan("trainer", stack_file, root / "plan-1"))
            converge1 = time.monotonic() - began
            began = time.monotonic()
            second = executor.up(write_plan("trainer", stack_file, root / "plan-2"))
            converge2 = time.monotonic() - began
        finally:
            server.close()
        check(len(first) == 11, f"up: {len(first)} commands, the job and the monitor running")
        check(second == [], f"up again: {len(second)} commands")
        executor.destroy()
        kept = all((tree / p).exists() for p in ("data/models/Qwen/Qwen3.6-27B/config.json",
                                                  "data/data/qwen36-mix-913k/SHA256SUMS"))
        check(kept, "destroy kept the models and the data set")
        leaks = int(token.encode() in (root / "commands.log").read_bytes() + (root / "state.json").read_bytes())
        check(leaks == 0, "no token in the command log or the state")
    finally:
        ssh.stop()
    return {"converge1": f"{converge1:.1f}s", "converge2": f"{converge2:.1f}s", "commands1": len(first),
            "commands2": len(second), "leaks": leaks, "dataKept": kept}


def _converges(bed, plan) -> bool:
    try:
        bed.up(plan=plan)
        return bed.problems() == [] and bed.up(plan=plan) == []
    except Exception as error:  # noqa: BLE001 — a figure, not a crash
        print(f"  ({error})")
        return False


if __name__ == "__main__":
    sys.exit(main())
