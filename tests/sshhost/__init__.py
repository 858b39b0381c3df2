"""A simulated Proxmox VE host reached over real SSH: an OpenSSH `sshd` on 127.0.0.1 serving a fakehost tree.

``SshHost(tree, workdir)`` starts Debian's `sshd` as a child process on a free port, with its own ed25519 host key
(``host_key`` is the line a stack pins as ``gpuhosts:host.ssh.hostKey``) and key authentication only (a generated
client key, ``private_key``). Every connection sees the simulated host: the server sets the variables of
``fakehost.host_env(tree)`` (``GPUHOSTS_HOST_ROOT``, ``GPUHOSTS_SYSFS_HOOK``, ``PATH``, ``PYTHONPATH``, ``LC_ALL``)
with its own ``SetEnv``; ``PATH`` starts with ``fault_bin``, empty unless a test makes a command fail there
(``fail_once``). It also sets ``SHLVL=1``: Debian's bash reads ``~/.bashrc`` for a command sent over SSH
only at shell level 1, and the home of the machine running the tests is not the simulated host's (a version
manager's ``~/.bashrc`` would put its shims before the stand-ins and cost a second a connection). ``AcceptEnv`` stays at Debian's default (``LANG LC_*``): variables a client sends with SSH
``setenv`` do not reach the command, as on a real host.

    with SshHost(tree, tmp_path / "ssh") as ssh:
        subprocess.run(ssh.ssh_argv("uname -r"), ...)
"""

from __future__ import annotations

import atexit
import getpass
import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

from fakehost import host_env

SSHD = Path("/usr/sbin/sshd")
# Debian's /etc/ssh/sshd_config.
ACCEPT_ENV = ("LANG", "LC_*")
HOST_VARIABLES = ("GPUHOSTS_HOST_ROOT", "GPUHOSTS_SYSFS_HOOK", "PATH", "PYTHONPATH", "LC_ALL")


class SshHostError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True)
    path.chmod(0o600)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(_children(child))
    return found


class SshHost:
    """An sshd that serves the simulated host rooted at ``tree``; ``workdir`` holds its keys, config and log."""

    host = "127.0.0.1"

    def __init__(self, tree: Path, workdir: Path):
        self.tree = Path(tree)
        self.workdir = Path(workdir)
        self.user = getpass.getuser()
        self.port = 0
        self.host_key = ""
        self.private_key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.log = self.workdir / "sshd.log"
        self.fault_bin = self.workdir / "fault-bin"
        self.process: subprocess.Popen | None = None

    # --- lifecycle --------------------------------------------------------------------------------------------
    def _write_config(self) -> Path:
        w = self.workdir
        env = host_env(self.tree)
        values = {k: env[k] for k in HOST_VARIABLES}
        # Empty unless a test puts a failing command there (see `fail_once`); it comes before the stand-ins.
        values["PATH"] = f"{self.fault_bin}:{values['PATH']}"
        for name, value in values.items():
            if any(c in value for c in ' "\'\\'):
                raise SshHostError(f"{name}={value!r}: sshd's SetEnv takes no spaces or quotes here")
        config = w / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {w / 'ssh_host_ed25519_key'}",
            f"PidFile {w / 'sshd.pid'}",
            f"AuthorizedKeysFile {w / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "MaxStartups 100",
            "LogLevel INFO",
            f"AcceptEnv {' '.join(ACCEPT_ENV)}",
            "SetEnv SHLVL=1 " + " ".join(f"{k}={v}" for k, v in values.items()),
            "",
        ]))
        return config

    def start(self) -> "SshHost":
        if not SSHD.exists():
            raise SshHostError(f"{SSHD} is missing: apt-get install -y openssh-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.fault_bin.mkdir(exist_ok=True)
        # Debian's sshd wants its privilege separation directory even when it runs as a child of a test.
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.host_key = _keygen(self.workdir / "ssh_host_ed25519_key", "gpuhosts-test-host")
        client_public = _keygen(self.private_key, "gpuhosts-test-client")
        (self.workdir / "authorized_keys").write_text(client_public + "\n")
        last_error = ""
        for _attempt in range(5):
            self.port = free_port()
            config = self._write_config()
            check = subprocess.run([str(SSHD), "-t", "-f", str(config)], capture_output=True, text=True)
            if check.returncode != 0:
                raise SshHostError(f"sshd rejects its configuration: {check.stderr.strip()}")
            log = open(self.log, "ab")
            self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log, process_group=0)
            log.close()
            if self._wait_listening():
                atexit.register(self.stop)  # never outlive the process that started it
                self.known_hosts.write_text(f"[{self.host}]:{self.port} {self.host_key}\n")
                return self
            self.stop()
            last_error = self.log.read_text(errors="replace")[-2000:]
        raise SshHostError(f"sshd did not start:\n{last_error}")

    def _wait_listening(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            self.kill_connections()
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def __enter__(self) -> "SshHost":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- connections ---------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def connection_pids(self) -> list[int]:
        """Every process the server runs for its connections (their sshd processes, shells and commands)."""
        return descendants(self.process.pid) if self.running else []

    def kill_connections(self) -> list[int]:
        """SIGKILL every connection's processes, commands included: the host's side of a dropped connection."""
        killed: list[int] = []
        for _round in range(20):
            pids = self.connection_pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        return killed

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no connection's process is left (a command whose client went away may still run)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.connection_pids():
                return True
            time.sleep(0.05)
        return False

    def fail_once(self, command: str, message: str, when: str = "*", skip: int = 0, status: int = 1) -> Path:
        """Of the calls of `command` on the host whose arguments match the glob `when`, number `skip` + 1 fails with
        `message` on stderr; every other call runs the real command."""
        path = self.fault_bin / command
        count = self.fault_bin / f".{command}.calls"
        count.write_text("0\n")
        path.write_text(f"""#!/bin/bash
# Fails once, at matching call {skip + 1}; otherwise the command of the same name that comes next on PATH.
count={shlex.quote(str(count))}
pattern={shlex.quote(when)}
# shellcheck disable=SC2254  # the pattern is a glob
case "$*" in
  $pattern)
    n=$(( $(cat "$count") + 1 ))
    echo "$n" >"$count"
    if [ "$n" = {skip + 1} ]; then
      printf '%s\\n' {shlex.quote(message)} >&2
      exit {int(status)}
    fi
    ;;
esac
real="$(PATH="${{PATH#*:}}"; type -P {shlex.quote(command)})"
exec "$real" "$@"
""")
        path.chmod(0o755)
        return path

    def drop_after(self, command: str, when: str = "*") -> Path:
        """The first call of `command` whose arguments match `when` runs to its end, then the script that called it
        is killed with its process group: a connection lost at the worst moment, between an action and its record."""
        path = self.fault_bin / command
        path.write_text(f"""#!/bin/bash
# Runs the real command once, then kills the connection that called it; afterwards only the real command.
pattern={shlex.quote(when)}
real="$(PATH="${{PATH#*:}}"; type -P {shlex.quote(command)})"
# shellcheck disable=SC2254  # the pattern is a glob
case "$*" in
  $pattern)
    rm -f "$0"
    "$real" "$@"
    kill -KILL 0  # the process group: the script that called it and everything it started
    ;;
esac
exec "$real" "$@"
""")
        path.chmod(0o755)
        return path

    def drop_on_output(self, pattern: str, how: str = "host") -> Path:
        """When a unit's script first prints a line matching the glob `pattern`, its connection is lost `how`:

        * ``host`` — the host's side dies with the command (its whole session, every process group of it);
        * ``client`` — the connection's sshd process is killed: the client sees the connection drop while the
          command runs on at the host until it next writes to the closed connection.

        The provider runs every unit script as `bash /tmp/gpuhosts-unit.*` (templates/common/run.sh.j2); this
        `bash` comes first on PATH, hands everything else to the real one and fires once, on the marker line.
        The returned path exists once it has fired."""
        kill = {
            # the session, not the process group: the script runs in a group of its own under timeout(1)
            "host": "pkill -KILL -s 0",
            "client": _KILL_SSHD_SESSION,
        }[how]
        path = self.fault_bin / "bash"
        fired = self.fault_bin / ".bash.fired"
        fired.unlink(missing_ok=True)
        path.write_text(_DROP_ON_OUTPUT.format(pattern=shlex.quote(pattern), fired=shlex.quote(str(fired)), kill=kill))
        path.chmod(0o755)
        return fired

    def ssh_argv(self, command: str, *options: str) -> list[str]:
        """The system ssh client as the executor uses it: pinned host key, key authentication, no sent variables."""
        return ssh_argv(self.host, self.port, self.user, self.known_hosts, self.private_key, command, *options)


def ssh_argv(host: str, port: int, user: str, known_hosts: Path, private_key: Path, command: str,
             *options: str) -> list[str]:
    return [
        "ssh", "-F", "/dev/null", "-T",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "IdentitiesOnly=yes",
        "-o", "ConnectTimeout=10",
        "-o", "LogLevel=ERROR",
        "-i", str(private_key),
        "-p", str(port),
        *options,
        f"{user}@{host}",
        command,
    ]


_KILL_SSHD_SESSION = """pid=$$
        while [ "$pid" -gt 1 ]; do
          case "$(cat "/proc/$pid/comm")" in sshd*) kill -KILL "$pid"; break ;; esac
          pid="$(awk '{print $4}' "/proc/$pid/stat")"
        done"""

_DROP_ON_OUTPUT = """#!/bin/bash
# Runs a unit script with its output watched for one marker line; anything else goes to the real bash.
pattern={pattern}
fired={fired}
if [ "$#" = 1 ] && [[ "$1" == /tmp/gpuhosts-unit.* ]] && [ ! -e "$fired" ]; then
  /bin/bash "$1" | while IFS= read -r line; do
    printf '%s\\n' "$line"
    # shellcheck disable=SC2254  # the pattern is a glob
    case "$line" in
      $pattern)
        : >"$fired"
        {kill}
        ;;
    esac
  done
  exit "${{PIPESTATUS[0]}}"
fi
exec /bin/bash "$@"
"""
