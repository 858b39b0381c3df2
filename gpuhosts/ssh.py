"""SSH to a host for the host-unit provider: paramiko, the host key pinned, the client key from memory.

One connection per host (address, port, user, pinned key), shared by every unit and thread of the provider
process; each command is a channel of its own. A dial that fails on the way (a timeout, a reset, a banner that
never came) is retried a bounded number of times with a timeout per dial, as pulumi-command does
(`dialErrorLimit` 10, 15 s per dial: pulumi-command provider/pkg/provider/remote connection.go). A dial that
another would meet again is not retried: a refused connection or no route to the host (what paramiko gathers per
address into NoValidConnectionsError: paramiko client.py `SSHClient.connect`), an unreachable network, a name
that does not resolve, a host key other than the pinned one, a refused client key. Once a host is found
unreachable, every later operation on it in this process fails at once with the same message, so a refresh of a
host that is down costs one dial, not one per unit. Scripts travel over a channel's standard input into a 0700
temporary file, never in the command string, so neither the 128 KiB single-argument limit nor an error message
ever carries a script.
"""

from __future__ import annotations

import base64
import errno
import io
import re
import select
import socket
import threading
import time
from dataclasses import dataclass

import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from gpuhosts import oplog

# A peer that is gone without a word (powered off, a cable pulled) sends no reset: the kernel notices it through
# TCP keepalives on an idle connection (first probe after 15 s, then every 10 s, 3 unanswered: 45 s) and through
# TCP_USER_TIMEOUT while data waits unacknowledged (60 s), and paramiko's transport then ends.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 15, 10, 3
UNACKED_LIMIT_S = 60
DEAD_PEER_S = max(KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_PROBES, UNACKED_LIMIT_S)
DIAL_ATTEMPTS = 10
DIAL_TIMEOUT_S = 15.0
TEMP_FILE = re.compile(r"^/tmp/gpuhosts-unit\.[A-Za-z0-9]+$")
# The head of a one-command operation: the script from stdin into a file of its own, then stdin is empty for the
# rest, as it is for an operation run on its own. Status 125 when the host cannot write the file.
UPLOAD_THEN_RUN = ('uploaded=$(umask 077; mktemp /tmp/gpuhosts-unit.XXXXXXXX) && cat >"$uploaded" '
                   '|| { echo "could not upload the script" >&2; exit 125; }\nexec </dev/null\n')
KEY_TYPES = (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)


class SshError(RuntimeError):
    pass


class Unreachable(SshError):
    """No connection could be made: the host is down, the address is wrong, or its key is not the pinned one."""


class HostKeyChanged(Unreachable):
    """The host answered with another key than the pinned one: a reinstalled host, or someone in between. Only a key
    checked another way than this connection tells which, so the message says how, and never to destroy."""


# ssh-keyscan -t takes the key's algorithm family, not its full name.
KEYSCAN_TYPES = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ecdsa-sha2-nistp256": "ecdsa",
                 "ecdsa-sha2-nistp384": "ecdsa", "ecdsa-sha2-nistp521": "ecdsa"}


def host_key_changed(target: "Target", shown: str) -> HostKeyChanged:
    kind = KEYSCAN_TYPES.get((target.host_key or "").split()[0] if target.host_key else "", "ed25519")
    port = "" if target.port == 22 else f"-p {target.port} "
    return HostKeyChanged(
        f"{target.address}:{target.port} presented another host key than the pinned one ({shown}), so nothing ran "
        f"on it. Verify the host's key out of band: `ssh-keyscan -t {kind} {port}{target.address}` from a network "
        f"you trust, compared with `ssh-keygen -lf /etc/ssh/ssh_host_{kind}_key.pub` on the host's console; if they "
        "agree, update gpuhosts:*.ssh.hostKey to that key and run again; if they do not, someone may be in between: "
        "do not connect")


class KeyRefused(Unreachable):
    """The host does not accept the client key."""


# Dial errors that a second dial would meet again, by errno (socket.connect raises them; paramiko gathers the first
# two per address into NoValidConnectionsError) and by getaddrinfo's code (EAI_AGAIN, a resolver that did not
# answer, is worth another try).
FINAL_ERRNOS = {errno.ECONNREFUSED: "connection refused", errno.EHOSTUNREACH: "no route to host",
                errno.ENETUNREACH: "network unreachable", errno.EHOSTDOWN: "host is down"}
FINAL_NAME_ERRORS = {socket.EAI_NONAME: "name does not resolve"}


def final_reason(error: BaseException) -> str | None:
    """Why no further dial could succeed, or None for a failure worth dialling again."""
    if isinstance(error, NoValidConnectionsError):
        reasons = {FINAL_ERRNOS.get(e.errno, "connection failed") for e in error.errors.values()}
        return " and ".join(sorted(reasons))
    if isinstance(error, socket.gaierror):
        return FINAL_NAME_ERRORS.get(error.errno)
    if isinstance(error, OSError) and not isinstance(error, socket.timeout):
        return FINAL_ERRNOS.get(error.errno)
    return None


class ConnectionDropped(SshError):
    """The connection ended before the command reported its exit status."""


@dataclass(frozen=True)
class Target:
    address: str
    port: int
    user: str
    host_key: str | None  # "ssh-ed25519 AAAA…"; None only with insecureIgnoreHostKey

    @classmethod
    def from_inputs(cls, host: dict) -> "Target":
        return cls(host["address"], int(host["port"]), host["user"], host.get("hostKey"))


@dataclass
class Completed:
    status: int
    stdout: str
    stderr: str


def load_private_key(text: str) -> paramiko.PKey:
    """The client key from the stack's secret, parsed in memory: it never touches a disk or an argv."""
    errors = []
    for key_type in KEY_TYPES:
        try:
            return key_type.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError) as error:
            errors.append(f"{key_type.__name__}: {type(error).__name__}")
    raise SshError("gpuhosts:sshPrivateKey is not an unencrypted ed25519, ECDSA or RSA private key in OpenSSH or PEM "
                   "form (" + "; ".join(errors) + ")")


class Connection:
    def __init__(self, target: Target, private_key: paramiko.PKey, *, dial_attempts: int = DIAL_ATTEMPTS,
                 dial_timeout: float = DIAL_TIMEOUT_S):
        self.target = target
        self._key = private_key
        self._dial_attempts = dial_attempts
        self._dial_timeout = dial_timeout
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self.dials = 0
        # Commands sent on this connection: a refresh's round trips to the host, counted for its figures.
        self.commands = 0
        self._unreachable: Unreachable | None = None

    def _dial(self) -> paramiko.SSHClient:
        target = self.target
        last = ""
        for attempt in range(self._dial_attempts):
            client = paramiko.SSHClient()
            if target.host_key is not None:
                key_type, key_data = target.host_key.split()[:2]
                name = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
                client.get_host_keys().add(name, key_type, paramiko.PKey.from_type_string(key_type,
                                                                                      base64.b64decode(key_data)))
                client.set_missing_host_key_policy(paramiko.RejectPolicy())
            else:
                client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            try:
                self.dials += 1
                oplog.write(f"gpuhosts-ssh: dial {target.user}@{target.address}:{target.port} "
                            f"attempt {attempt + 1}")
                client.connect(target.address, port=target.port, username=target.user, pkey=self._key,
                               timeout=self._dial_timeout, banner_timeout=self._dial_timeout,
                               auth_timeout=self._dial_timeout, allow_agent=False, look_for_keys=False)
                transport = client.get_transport()
                transport.set_keepalive(15)
                dead_peer_detection(transport.sock)
                return client
            except paramiko.BadHostKeyException as error:
                client.close()
                raise host_key_changed(target, error.key.get_name()) from None
            except paramiko.AuthenticationException:
                client.close()
                raise KeyRefused(f"{target.user}@{target.address}:{target.port} refused the key of "
                                 "gpuhosts:sshPrivateKey") from None
            except (OSError, socket.timeout, paramiko.SSHException, EOFError) as error:
                client.close()
                last = f"{type(error).__name__}: {error}"
                reason = final_reason(error)
                if reason is not None:
                    raise Unreachable(f"could not reach {target.user}@{target.address}:{target.port}: {reason} "
                                      f"({last}), so it was not dialled again") from None
                if attempt + 1 < self._dial_attempts:
                    time.sleep(min(0.25 * (attempt + 1), 2.0))
        raise Unreachable(f"could not reach {target.user}@{target.address}:{target.port} after "
                          f"{self._dial_attempts} attempts: {last}")

    def client(self) -> paramiko.SSHClient:
        with self._lock:
            if self._unreachable is not None:
                raise self._again(self._unreachable)
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                if self._client is not None:
                    self._client.close()
                try:
                    self._client = self._dial()
                except Unreachable as error:
                    self._client = None
                    self._unreachable = error
                    raise
            return self._client

    @staticmethod
    def _again(error: Unreachable) -> Unreachable:
        """The first failure, raised afresh: each caller gets an exception of its own with the same message."""
        return type(error)(str(error))

    def forget_unreachable(self) -> None:
        """Dial again from now on: for a wait on purpose through a time the host does not answer (its reboot)."""
        with self._lock:
            self._unreachable = None

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def exec(self, command: str, stdin: bytes = b"", *, timeout: float | None = None) -> Completed:
        """Run `command` on a channel of its own; `stdin` is written and then closed."""
        status, out, err = self.exec_bytes(command, stdin, timeout=timeout)
        return Completed(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def exec_bytes(self, command: str, stdin: bytes = b"", *,
                   timeout: float | None = None) -> tuple[int, bytes, bytes]:
        """`exec`, its output as the bytes the host sent: a caller that frames several outputs in one splits them
        by length before decoding."""
        self.commands += 1
        try:
            channel = self.client().get_transport().open_session()
        except (paramiko.SSHException, EOFError, OSError) as error:
            self.close()
            raise ConnectionDropped(f"could not open a channel: {error}") from None
        channel.exec_command(command)
        if stdin:
            channel.sendall(stdin)
        channel.shutdown_write()
        out, err = bytearray(), bytearray()
        transport = channel.get_transport()
        deadline = None if timeout is None else time.monotonic() + timeout
        # Until the server has sent the exit status and closed its side (all output precedes that).
        while not (channel.exit_status_ready() and channel.eof_received) or channel.recv_ready() \
                or channel.recv_stderr_ready():
            if channel.recv_ready():
                out += channel.recv(65536)
            elif channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            elif channel.closed or not transport.is_active():
                break
            elif deadline is not None and time.monotonic() > deadline:
                channel.close()
                raise SshError(f"no answer within {timeout:.0f} s")
            else:
                select.select([channel], [], [], 0.2)
        if not channel.exit_status_ready():
            channel.close()
            self.close()
            raise ConnectionDropped("the connection ended before the command finished")
        status = channel.recv_exit_status()
        channel.close()
        if status == -1:
            # The server closed the channel without an exit status: the command was killed with its session.
            raise ConnectionDropped("the command ended without an exit status (its session was killed)")
        return status, bytes(out), bytes(err)

    def run_script(self, script: str, command_template, stdin: bytes = b"", *,
                   timeout: float | None = None) -> Completed:
        """Upload `script` into a 0600 temporary file, then run `command_template(path)` with `stdin`.

        Without `stdin` (a probe, most ensures) both happen in one command: the script is the command's stdin,
        and the command template reads the file's path from `$uploaded` (`command_template(None)`); the host
        starts one session and one shell for the operation instead of two."""
        if not stdin:
            return self.exec(UPLOAD_THEN_RUN + command_template(None), script.encode(), timeout=timeout)
        made = self.exec("umask 077; f=$(mktemp /tmp/gpuhosts-unit.XXXXXXXX) && cat >\"$f\" && printf '%s\\n' \"$f\"",
                         script.encode())
        path = made.stdout.strip()
        if made.status != 0 or not TEMP_FILE.match(path):
            raise SshError(f"could not upload the script: {made.stderr.strip()[-500:]}")
        return self.exec(command_template(path), stdin, timeout=timeout)


def dead_peer_detection(sock) -> None:
    """TCP keepalive and TCP_USER_TIMEOUT on the connection's socket (Linux's names; left out where absent)."""
    if not isinstance(sock, socket.socket):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES), ("TCP_USER_TIMEOUT", UNACKED_LIMIT_S * 1000)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class Pool:
    """One connection per target, for the life of the provider process."""

    def __init__(self):
        self._connections: dict[Target, Connection] = {}
        self._lock = threading.Lock()

    def get(self, target: Target, private_key_text: str, **options) -> Connection:
        with self._lock:
            connection = self._connections.get(target)
            if connection is None:
                connection = Connection(target, load_private_key(private_key_text), **options)
                self._connections[target] = connection
            return connection

    def dials(self) -> int:
        return sum(c.dials for c in self._connections.values())

    def commands(self) -> int:
        return sum(c.commands for c in self._connections.values())

    def close(self) -> None:
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
