"""Dialling a host (gpuhosts/ssh.py): a host that refuses is not dialled again, a dial cut on the way is, within the
bound, and once a host is found unreachable every later operation on it fails at once with the same message.

Verdicts count dials (the provider's `gpuhosts-ssh: dial` lines), never seconds.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading

import pytest

from gpuhosts.provider import DIAL_ATTEMPTS_VARIABLE, UnitFailed, dial_attempts
from gpuhosts.ssh import DIAL_ATTEMPTS, Connection, Target, Unreachable, load_private_key
from sshhost import SshHost, free_port


class Gate:
    """A TCP listener on loopback that resets the first `cut` connections (RST, as a flaky link or a firewall
    does) and hands the others to `upstream` byte for byte."""

    def __init__(self, cut: int, upstream: int | None = None):
        self.cut, self.upstream, self.accepted = cut, upstream, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.cut or self.upstream is None:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.upstream))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    root = tmp_path_factory.mktemp("dial")
    (root / "tree").mkdir()
    host = SshHost(root / "tree", root / "ssh").start()
    yield host
    host.stop()


def connection(sshd: SshHost, port: int, attempts: int = 10) -> Connection:
    target = Target(sshd.host, port, sshd.user, sshd.host_key)
    return Connection(target, load_private_key(sshd.private_key.read_text()), dial_attempts=attempts)


def failure(connection: Connection) -> str:
    with pytest.raises(Unreachable) as caught:
        connection.exec("true")
    return str(caught.value)


def test_a_refused_dial_is_not_dialled_again_and_later_operations_fail_at_once_alike(sshd):
    refused = connection(sshd, free_port())
    first = failure(refused)
    assert "connection refused" in first and "not dialled again" in first, first
    assert refused.dials == 1
    # Every later operation in this process: the same message, no dial.
    assert [failure(refused) for _ in range(3)] == [first] * 3
    assert refused.dials == 1


def test_a_dial_reset_on_the_way_is_retried_up_to_the_bound(sshd):
    gate = Gate(cut=10**6)
    try:
        flaky = connection(sshd, gate.port, attempts=3)
        first = failure(flaky)
        assert "after 3 attempts" in first, first
        assert flaky.dials == 3 and gate.accepted == 3
        assert failure(flaky) == first and flaky.dials == 3
    finally:
        gate.close()


def test_a_dial_reset_once_succeeds_on_the_next(sshd):
    gate = Gate(cut=1, upstream=sshd.port)
    try:
        flaky = connection(sshd, gate.port, attempts=3)
        answer = flaky.exec("echo answered")
        assert (answer.status, answer.stdout) == (0, "answered\n"), answer
        assert flaky.dials == 2
        flaky.close()
    finally:
        gate.close()


def test_a_wait_through_a_reboot_dials_again_after_forgetting(sshd):
    """The provider's reboot wait forgets the refusal it expects (gpuhosts/provider.py `_await_reboot`)."""
    port = free_port()
    waiting = connection(sshd, port)
    failure(waiting)
    gate = Gate(cut=0, upstream=sshd.port)
    try:
        waiting.target = Target(sshd.host, gate.port, sshd.user, sshd.host_key)
        assert failure(waiting) and waiting.dials == 1  # still the first answer: no dial
        waiting.forget_unreachable()
        assert waiting.exec("true").status == 0 and waiting.dials == 2
        waiting.close()
    finally:
        gate.close()


def test_the_provider_takes_its_bound_from_its_environment(monkeypatch):
    monkeypatch.delenv(DIAL_ATTEMPTS_VARIABLE, raising=False)
    assert dial_attempts() == DIAL_ATTEMPTS == 10
    monkeypatch.setenv(DIAL_ATTEMPTS_VARIABLE, "3")
    assert dial_attempts() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(DIAL_ATTEMPTS_VARIABLE, bad)
        with pytest.raises(UnitFailed, match=DIAL_ATTEMPTS_VARIABLE):
            dial_attempts()


def test_a_variable_sent_over_ssh_does_not_reach_the_host(sshd):
    """The simulated host accepts what Debian's sshd accepts (AcceptEnv LANG LC_*), so a variable a client sends
    never steers a script, on it as on a real host."""
    seen = subprocess.run(sshd.ssh_argv('echo "${GPUHOSTS_PROBE:-unset} ${LANG:-unset}"', "-o",
                                        "SetEnv=GPUHOSTS_PROBE=1 LANG=C.UTF-8"), capture_output=True, text=True)
    assert seen.stdout.split() == ["unset", "C.UTF-8"], seen.stderr
