"""The monitor as TrainingMonitor deploys it: the node runs the Flask release the tests ran, the package's files
arrive whole under a managed-by header, and the unit starts what the CLI accepts."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import pytest

from gpuhosts.fields import is_loopback
from gpuhosts.plans.training_monitor import MONITOR_PACKAGE
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.training import FLASK_VERSION
from conftest import PROJECT, TRAINER_SECRETS, trainer_values
from gpuhosts.stacks import validate_trainer_stack
from gpuhosts_monitor import bind


def test_the_node_gets_the_flask_release_of_the_lock_file():
    lock = tomllib.loads((PROJECT / "uv.lock").read_text())
    (flask,) = [p for p in lock["package"] if p["name"] == "flask"]
    assert flask["version"] == FLASK_VERSION


def test_every_file_of_the_package_arrives_under_a_header():
    plan = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS))
    monitor = plan.graph["training-monitor"]
    shipped = {f.path.split("/gpuhosts_monitor/", 1)[1]: f.content for f in monitor.files if "/gpuhosts_monitor/" in f.path}
    local = {p.relative_to(MONITOR_PACKAGE).as_posix(): p.read_text() for p in MONITOR_PACKAGE.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    assert sorted(shipped) == sorted(local)
    for name, content in shipped.items():
        header, body = content.split("\n", 1)
        assert "managed by gpuhosts" in header and body == local[name], name


def test_the_unit_starts_what_the_cli_accepts(tmp_path):
    values = trainer_values()
    values["training"]["monitor"].update(bind="0.0.0.0", tokenSecret="monitorToken")
    plan = plan_training_node(validate_trainer_stack(values, TRAINER_SECRETS | {"monitorToken"}))
    (unit,) = [f for f in plan.graph["training-monitor"].files if f.path.endswith(".service")]
    exec_start = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit.content.replace("\\\n", " "), flags=re.M | re.S)[1]
    argv = shlex.split(exec_start)
    assert argv[1:3] == ["-m", "gpuhosts_monitor"]
    assert argv[argv.index("--bind") + 1] == "0.0.0.0" and argv[argv.index("--token-file") + 1] == "/etc/gpuhosts/monitor.token"
    assert plan.graph["training-monitor"].stdin_secret == "monitorToken"
    # The same arguments without the token file are refused by the monitor itself: the bind needs a token.
    without = [a for i, a in enumerate(argv[3:]) if a != "--token-file" and argv[3:][i - 1] != "--token-file"]
    result = subprocess.run([sys.executable, "-m", "gpuhosts_monitor", *without], capture_output=True, text=True,
                            cwd=PROJECT, timeout=60)
    assert result.returncode == 2 and "--token-file" in result.stderr + result.stdout


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "0.0.0.0", "::", "192.168.1.5", "localhost",
                                     "fe80::1", "", "not an address"])
def test_the_stack_and_the_monitor_agree_where_no_token_is_needed(address):
    assert is_loopback(address) == bind.is_loopback(address)
