"""`make lifecycle`: the stacks' lifecycle, drift, renames, faults, refresh and parallelism on the simulated hosts
over SSH through the real host-unit provider, with figures in a form to compare across changes:

    lifecycle: converge1=<s> converge2=<s> commands1=<n> commands2=0 writes2=0 faults=<ok>/<tried> refused=<ok>/<tried> renames=<ok>/<tried>
    drift: cases=<n> shown=<n> repaired=<n> clean=<n> refused=<ok>/<tried>
    alias: creates=0 deletes=0 commands=0                                     (kpro5 and trainer converged flat first)
    refresh: stack=<name> hosts=<n> units=<n> connections=<n> seconds=<s> [of_stack=<n> left_out=<units>]
                                                                              (one line per stack, in sync)
    parallel: units=<n> max_concurrent=<n> lock_waits=<n> failures=0          (a fresh converge of kpro5's units)
    critical: fresh_wall=<s> sum_units=<s>                                    (stand-in durations: see DURATIONS)
    rollout: replicas=<n> requests=<n> failed=0 gate_failures_stopped=<ok>/<tried>
                                  (tests/lifecycle/test_rollout.py: the real smg router, under load)

A converge is the program run (the real __main__.py under the mock runtime) plus `pulumi up` of its resources.
commands counts the units' creates, updates and deletes (a refresh's reads are not commands); writes2 counts the
commands of the second converge whose result said changed.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# The stand-ins' durations for the critical-path figure, in the ratio of a real first converge of kpro5: a DKMS
# build of the driver (minutes), an engine's install into its environment (minutes), the 52 GB of weights.
DURATIONS = {"driver": 3.0, "env": 4.0, "download": 12.0}


def main() -> int:
    sys.path.insert(0, str(TESTS))
    from engine import ApplyError
    from engine_standin import Engine as EngineStandin, start_engine
    from fakehost.util import configure
    from lifecycle.drifts import DRIFTS
    from fakehost.tree import OWNER_RECORDS, tree_listing, volatile
    from lifecycle.renames import RENAMES, carry_over, rewritten
    from sshhost import free_port
    from sshhost.bed import SECRETS, Bed, names
    from sshhost.ladder import DROPS, HALF_WAY, ORDER, bed_before, build_ladder, marker
    from trainer_node import TrainerBed

    root = Path(tempfile.mkdtemp(prefix="gpuhosts-lifecycle-"))
    failures: list[str] = []
    lines: list[str] = []

    def check(ok: bool, what: str) -> bool:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)
        return ok

    def commands(ops) -> list:
        return [op for op in ops if op.operation != "read"]

    port = free_port()
    standin = start_engine(EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"]),
                           port)
    try:
        # --- lifecycle ------------------------------------------------------------------------------------------
        print("lifecycle of kpro5 over SSH", flush=True)
        ladder = build_ladder(root / "ladder")
        bed = Bed.seed(root / "main", ladder.bed.run_file, ladder.bed.sha256)
        start = bed.digest()
        began = time.monotonic()
        ops1 = commands(bed.up(program=bed.program()))
        converge1 = time.monotonic() - began
        check(bed.problems() == [], f"up from the seed: {len(ops1)} commands, host in the declared state")
        began = time.monotonic()
        ops2 = commands(bed.up(program=bed.program()))
        converge2 = time.monotonic() - began
        writes2 = sum(bool(op.changed) for op in ops2)
        check(not ops2, f"up again: {len(ops2)} commands")
        bed.destroy()
        check(bed.digest() == start, "destroy: tree digest back to the start")
        bed.close()

        print("faults", flush=True)
        injected = survived = 0
        for how in DROPS:
            for index, name in enumerate(ORDER):
                fbed = bed_before(ladder, index, root / f"drop-{how}-{index}")
                fired = fbed.ssh.drop_on_output(marker(name), how)
                injected += 1
                try:
                    fbed.up()
                except ApplyError:
                    pass
                fbed.ssh.wait_idle()
                ok = fired.exists() and _converges(fbed)
                survived += ok
                check(ok, f"connection dropped ({how}) at '{marker(name)}': next up converges")
                fbed.close()
        for command, when, skip, message, unit in HALF_WAY:
            fbed = bed_before(ladder, ORDER.index(unit), root / f"half-{command}")
            fbed.ssh.fail_once(command, message, when=when, skip=skip)
            injected += 1
            try:
                fbed.up()
            except ApplyError:
                pass
            ok = _converges(fbed) and fbed.digest() == ladder.converged
            survived += ok
            check(ok, f"{command} failing half-way in {unit}: next up repairs it")
            fbed.close()

        print("bad host states", flush=True)
        tried = refused = 0
        for label, make, words, values_of, targets in [
            ("running VM", lambda r: Bed.seed(r, ladder.bed.run_file, ladder.bed.sha256,
                                             vms=((101, "win-3090", "0000:01:00", True),
                                                  (103, "a6000-vm", "0000:41:00", True))),
             "VM 103 is running with 0000:41:00 passed through", None, None),
            ("user space", lambda r: Bed.copy_of(ladder.bed, r), "Driver/library version mismatch",
             lambda b: {**b.values(), "nvidia": {**b.values()["nvidia"], "version": "570.148.08"}},
             ["ct129-nvidia-userspace"]),
        ]:
            rbed = make(root / f"bad-{label.replace(' ', '-')}")
            tried += 1
            before = rbed.digest()
            try:
                rbed.up(values_of(rbed) if values_of else None, targets=targets)
                text = ""
            except ApplyError as error:
                text = str(error)
            ok = "refused:" in text and words in text and rbed.digest() == before
            refused += ok
            check(ok, f"refused, host unchanged: {words}")
            rbed.close()

        print("renames", flush=True)
        renamed = 0
        for rename in RENAMES:
            rbed = Bed.copy_of(ladder.bed, root / f"rename-{len(rename.name)}-{renamed}")
            before = tree_listing(rbed.tree, (*volatile(rbed.tree), OWNER_RECORDS))
            try:
                # a host's name is a label on its metrics: the units whose declared state the rename moves may
                # rewrite their own files, nothing else (tests/lifecycle/test_renames.py, the same rule)
                moved = rewritten(rbed.values(), rename.values(rbed)) if rename.values else {}
                program = rename.program(rbed)
                ops = rbed.up(program=program, replace=list(rename.replace))
                after = tree_listing(rbed.tree, (*volatile(rbed.tree), OWNER_RECORDS))
                changed_paths = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
                acted = {op.name for op in commands(ops) if op.changed}
                ok = (changed_paths <= set().union(*moved.values()) and acted <= set(moved)
                      and rbed.preview(program=program).changed() == {})
            except ApplyError as error:
                print(f"  ({error})")
                ok = False
            renamed += ok
            check(ok, f"{rename.name}: the host as it was")
            rbed.close()
        ladder.bed.close()
        lines.append(f"lifecycle: converge1={converge1:.1f}s converge2={converge2:.1f}s commands1={len(ops1)} "
                     f"commands2={len(ops2)} writes2={writes2} faults={survived}/{injected} refused={refused}/{tried} "
                     f"renames={renamed}/{len(RENAMES)}")

        # --- a stack converged before the resource tree, carried over by the units' aliases --------------------
        print("aliases", flush=True)
        abed = Bed.seed(root / "alias-kpro5")
        kpro5 = carry_over(abed, abed.program(abed.services_values(port, free_port())))
        abed.close()
        tbed = TrainerBed(root / "alias-trainer")
        trainer = carry_over(tbed, tbed.program())
        tbed.close()
        creates, deletes = (kpro5.count(op) + trainer.count(op) for op in ("create", "delete"))
        check(kpro5.commands + trainer.commands == 0, f"flat state carried over: {kpro5.figure()}; {trainer.figure()}")
        lines.append(f"alias: creates={creates} deletes={deletes} commands={kpro5.commands + trainer.commands}")

        # --- drift ----------------------------------------------------------------------------------------------
        print("drift", flush=True)
        template = Bed.seed(root / "drift-template")
        values = template.services_values(port, free_port())
        template.up(values)
        shown = repaired = clean = refusals = refusal_cases = 0
        for index, drift in enumerate(DRIFTS):
            dbed = Bed.copy_of(template, root / f"drift-{index}") if drift.stack == "kpro5" else \
                TrainerBed(root / f"drift-{index}")
            try:
                if drift.stack == "trainer":
                    dbed.up()
                    program = dbed.program()
                else:
                    here = dict(values, host={**values["host"], "ssh": {**values["host"]["ssh"], "port": dbed.ssh.port,
                                                                       "hostKey": dbed.ssh.host_key}})
                    program = dbed.program(here)
                drift.tamper(dbed)
                if drift.fix is not None:
                    # What `gpuhosts check --deep` tells the operator to do about what a refresh does not see.
                    drift.fix(dbed)
                preview = dbed.preview(program=program)
                changed = preview.changed()
                is_shown = set(changed) == set(drift.shown) and all(
                    path in changed[unit].diffs for unit, path in drift.shown.items()) and all(
                    words in str(preview.facts[unit].get(drift.shown[unit][len('facts["'):-len('"]')]))
                    for unit, words in drift.names.items())
                shown += is_shown
                if drift.refuse:
                    refusal_cases += 1
                    before = dbed.digest()
                    try:
                        dbed.up(program=program)
                        text = ""
                    except ApplyError as error:
                        text = str(error)
                    ok = drift.refuse in text and dbed.digest() == before
                    refusals += ok
                    check(is_shown and ok, f"{drift.name}: shown, refused, host unchanged")
                    continue
                ran = sorted(names(dbed.up(program=program)))
                is_repaired = ran == sorted(drift.repairs)
                repaired += is_repaired
                is_clean = all(dbed.preview(program=program).changed() == {} for _ in range(2))
                clean += is_clean
                check(is_shown and is_repaired and is_clean, f"{drift.name}: shown, repaired by {ran}, clean")
            except ApplyError as error:
                check(False, f"{drift.name}: {error}")
            finally:
                dbed.close()
        template.close()
        cases = len(DRIFTS) - refusal_cases
        lines.append(f"drift: cases={cases} shown={shown - refusals} repaired={repaired} clean={clean} "
                     f"refused={refusals}/{refusal_cases}")

        # --- refresh of an in-sync host, per stack ------------------------------------------------------------
        print("refresh", flush=True)
        kbed = Bed.seed(root / "refresh-kpro5")
        kvalues = kbed.services_values(port, free_port())
        kbed.up(kvalues)
        lines.append(_refresh_line("kpro5", kbed.engine) + _left_out(kbed.engine, "kpro5"))
        kbed.close()
        tbed = TrainerBed(root / "refresh-trainer")
        tbed.up()
        lines.append(_refresh_line("trainer", tbed.engine))
        tbed.close()

        # --- a fresh converge at Pulumi's default parallelism ----------------------------------------------------
        print("parallel and critical path", flush=True)
        pbed = Bed.seed(root / "parallel")
        pvalues = pbed.services_values(port, free_port())
        failed = 0
        try:
            ops = commands(pbed.up(pvalues))
        except ApplyError as error:
            print(f"  ({error})")
            ops, failed = commands(error.ops), 1
        lines.append(f"parallel: units={len(ops)} max_concurrent={pbed.engine.max_concurrent} "
                     f"lock_waits={sum(op.lock_waits for op in ops)} failures={failed + sum(op.outcome != 'ok' for op in ops)}")
        pbed.close()

        cbed = Bed.seed(root / "critical")
        configure(cbed.tree, durations=DURATIONS)
        began = time.monotonic()
        ops = commands(cbed.up(cbed.services_values(port, free_port())))
        wall = time.monotonic() - began
        lines.append(f"critical: fresh_wall={wall:.1f}s sum_units={sum(op.seconds for op in ops):.1f}s")
        cbed.close()

        print("rollout under load", flush=True)
        lines.append(_rollout_line(check))
    finally:
        standin.shutdown()
        standin.server_close()
        shutil.rmtree(root, ignore_errors=True)

    if failures:
        print(f"{len(failures)} check(s) failed: " + "; ".join(failures))
    print("\n".join(lines))
    return 1 if failures else 0


def _rollout_line(check) -> str:
    """tests/lifecycle/test_rollout.py as it is (three replicas behind the real smg router, requests through it for
    each whole `up`), its counts from the file it writes: requests and failures of both rollouts, and whether the
    failed gate stopped its rollout with the other replicas serving."""
    import json
    import subprocess

    from conftest import ROLLOUT_FIGURES as FIGURES

    FIGURES.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, "-m", "pytest", str(TESTS / "lifecycle" / "test_rollout.py"), "-q",
                             "-p", "no:xdist", "-o", "addopts="], cwd=TESTS.parent)
    check(result.returncode == 0, "rollout: tests/lifecycle/test_rollout.py passed")
    figures = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {}
    rolled, gate = figures.get("rolled", {}), figures.get("gate_failure", {})
    requests = rolled.get("requests", 0) + gate.get("requests", 0)
    failed = rolled.get("failed", 0) + gate.get("failed", 0)
    return (f"rollout: replicas={rolled.get('replicas', 0)} requests={requests} failed={failed} "
            f"gate_failures_stopped={gate.get('stopped', 0)}/{int(bool(gate))}")


def timed_refresh(engine) -> tuple[float, int, dict]:
    """An in-sync preview's refresh in one provider process: its seconds, the units it probed, what drifted."""
    engine.log.clear()
    engine._start()
    try:
        began = time.monotonic()
        stored = engine.state()
        changed = engine.refresh(stored)
        seconds = time.monotonic() - began
    finally:
        engine._stop()
    return seconds, sum(1 for e in stored.values() if "ensure" in e["inputs"]), changed


def _refresh_line(stack: str, engine) -> str:
    """An in-sync preview's refresh: one provider process, one connection per host, every unit's probe."""
    seconds, units, changed = timed_refresh(engine)
    suffix = "" if not changed else f" drifted={sorted(changed)}"
    return (f"refresh: stack={stack} hosts=1 units={units} connections={engine.connections()} "
            f"seconds={seconds:.2f}{suffix}")


def _left_out(engine, stack: str) -> str:
    """The committed stack's units this refresh did not have: its bake-off measures engines, which an in-sync
    refresh of the host does not start, so the bed converges the stack without it; the line says so."""
    from conftest import KPRO5_SECRETS, kpro5_values
    from gpuhosts.plans.proxmox_host import plan_host
    from gpuhosts.stacks import validate_stack

    planned = set(plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS)).units)
    stored = {e["name"] for e in engine.state().values() if "ensure" in e["inputs"]}
    missing = sorted(planned - stored)
    return f" of_stack={len(planned)} left_out={','.join(missing)}" if missing else ""


def _converges(bed) -> bool:
    from engine import ApplyError

    try:
        program = bed.program()
        bed.up(program=program)
        return bed.problems() == [] and bed.preview(program=program).changed() == {}
    except ApplyError as error:
        print(f"  ({error})")
        return False


if __name__ == "__main__":
    sys.exit(main())
