"""The real engine when things go wrong or run at once: an `up` interrupted mid-apply (SIGINT, then SIGKILL of the
CLI), recovered with the CLI's own commands; a second `up` of a stack while one runs, refused by the backend's lock;
two stacks on two hosts converged at once; `up --target` of one service."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from realengine import COMMAND_CAP_S, Stack
from realengine.hosts import Held, entries
from sshhost.bed import Bed

pytestmark = pytest.mark.pulumi


class Lines:
    """A running command's output, read as it comes."""

    def __init__(self, process):
        self.lines: list[str] = []
        self.seen = threading.Condition()
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process) -> None:
        for line in process.stdout:
            with self.seen:
                self.lines.append(line)
                self.seen.notify_all()

    def wait_for(self, words: str, cap_s: float = COMMAND_CAP_S) -> None:
        with self.seen:
            if not self.seen.wait_for(lambda: any(words in line for line in self.lines), timeout=cap_s):
                raise AssertionError(f"{words!r} never appeared:\n{''.join(self.lines)[-4000:]}")


def provider_processes(project) -> list[int]:
    """The dynamic-provider servers started from this project copy's environment."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv[0].decode(errors="replace").startswith(str(project.root / ".venv")) and b"pulumi.dynamic" in argv:
            found.append(int(pid))
    return found


def wait_gone(project, cap_s: float = 60) -> list[int]:
    waited = 0.0
    while provider_processes(project) and waited < cap_s:
        time.sleep(0.2)
        waited += 0.2
    return provider_processes(project)


def test_an_interrupted_up_is_recovered_by_the_cli_and_converges(project, tmp_path, figures):
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "cut", "kpro5", bed.values(), bed.secrets())
        held = Held(bed.ssh, "update-initramfs")
        process = project.start("up", "--yes", "--skip-preview", stack=stack.name)
        output = Lines(process)
        held.wait_started(process)
        os.killpg(process.pid, signal.SIGINT)
        # The CLI answers the first ^C by waiting for the steps in flight (the held one never ends), so a second
        # signal is what an operator has left: SIGKILL.
        output.wait_for("^C received")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=COMMAND_CAP_S)
        held.release()
        # The provider process the killed CLI left ends by itself once its engine is gone (gpuhosts/provider.py
        # watch_engine); the step it had in flight may still finish on the host.
        assert wait_gone(project) == [], "a provider process outlived its CLI"

        locked = stack.up(check=False)
        assert locked.returncode != 0 and "locked" in locked.stderr + locked.stdout
        assert locked.host_operations == []
        stack.pulumi("cancel", "--yes")
        pending = stack.export()["deployment"].get("pending_operations") or []
        assert pending, "the interrupted create left no pending operation"
        stack.refresh("--clear-pending-creates")
        up = stack.up()
        assert bed.problems() == []
        assert not stack.export()["deployment"].get("pending_operations")
        assert stack.preview().changed() == {}
        figures.add("faults-interrupted", line="pulumi-faults", interrupted_up="converged",
                    pending_operations=len(pending), recovered_by="cancel+refresh --clear-pending-creates+up",
                    recovery_up_s=up.seconds)
    finally:
        bed.close()


def test_a_second_up_of_a_running_stack_is_refused_and_two_stacks_converge_at_once(project, tmp_path, figures):
    first, second = Bed.seed(tmp_path / "first"), Bed.seed(tmp_path / "second")
    try:
        one = Stack(project, "one", "kpro5", first.values(), first.secrets())
        two = Stack(project, "two", "kpro5", second.values(), second.secrets())
        held = Held(first.ssh, "update-initramfs")
        running = project.start("up", "--yes", "--skip-preview", stack=one.name)
        beside = project.start("up", "--yes", "--skip-preview", stack=two.name)
        held.wait_started(running)
        while_held = entries(first.tree)
        again = one.up(check=False)
        assert again.returncode != 0 and "currently locked" in again.stdout + again.stderr, again.stderr[-2000:]
        assert again.host_operations == [] and entries(first.tree) == while_held
        held.release()
        for process in (running, beside):
            output = process.communicate(timeout=COMMAND_CAP_S)[0]
            assert process.returncode == 0, output[-4000:]
        assert first.problems() == [] and second.problems() == []
        assert one.preview().changed() == {} and two.preview().changed() == {}
        figures.add("faults-parallel", line="pulumi-faults", parallel_stacks="ok", same_stack_locked="yes")
    finally:
        first.close()
        second.close()


def test_up_with_a_target_runs_only_that_services_units(project, sglang, tmp_path, figures):
    from sshhost import free_port

    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "target", "kpro5", bed.services_values(sglang.port, free_port()), bed.secrets())
        stack.up()
        stack.set_path("services[0].contextLength", 65536)  # qwen-sglang
        stack.set_path("services[1].contextLength", 65536)  # qwen-vllm-dflash, stopped
        stack.set_path("host.kernelArgs[1]", "pcie_aspm=off")  # a host unit's change beside them
        planned = stack.preview().changed()
        assert {"ct129-service-qwen-sglang", "ct129-service-qwen-vllm-dflash", "vfio-binding"} <= set(planned)
        service = stack.urn("ct129-service-qwen-sglang").rsplit("$", 1)[0]  # its component's chain of types
        up = stack.up("--target", f"{service}$**::*qwen-sglang*", "--target-dependents")
        ran = sorted({unit for unit, _ in up.host_operations})
        assert ran and all(unit.endswith("qwen-sglang") for unit in ran), ran
        assert "ct129-service-qwen-sglang" in ran
        left = stack.preview().changed()
        assert {"ct129-service-qwen-vllm-dflash", "vfio-binding"} <= set(left) and not [
            name for name in left if name.endswith("qwen-sglang")], left
        figures.add("faults-target", line="pulumi-faults", target="only_service", ran=len(ran))
    finally:
        bed.close()
