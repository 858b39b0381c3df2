"""The simulated package database behaves as dpkg's does where units run side by side: apt-get writes it whole and
sorted, and a dpkg-query at the same moment reads the old database or the new (dpkg renames its status-new over
the status: lib/dpkg/dbmodify.c, writedb). An exporter's teardown reads the database outside the dpkg lock while
another unit's apt-get rewrites it; a database cut short would make it leave its packages behind."""

from __future__ import annotations

import contextlib
import io
import os
import threading

import pytest

from fakehost import system
from fakehost.tree import seed_kpro5
from fakehost.util import Fail


@pytest.fixture
def host(tmp_path, monkeypatch):
    tree = seed_kpro5(tmp_path / "kpro5")
    monkeypatch.setenv("GPUHOSTS_HOST_ROOT", str(tree))
    return tree


def quietly(function, *args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return function(*args)


def test_a_reader_never_sees_the_database_cut_short_while_apt_get_rewrites_it(host):
    seed = system.dpkg_list(host)
    stop = threading.Event()
    short: list[int] = []

    def read() -> None:
        while not stop.is_set():
            seen = set(system.dpkg_list(host))
            if not set(seed) <= seen:
                short.append(len(seen))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(150):
            quietly(system.cmd_apt_get, ["install", "-y", "prometheus-node-exporter"])
            quietly(system.cmd_apt_get, ["purge", "-y", "prometheus-node-exporter"])
    finally:
        stop.set()
        reader.join()
    assert short == [], f"{len(short)} reads saw fewer packages than the seed has"
    assert system.dpkg_list(host) == seed
    assert not [p for p in (host / "var/lib/fakehost").iterdir() if ".new-" in p.name]


def test_installs_in_either_order_leave_the_same_sorted_database(host, tmp_path, monkeypatch):
    quietly(system.cmd_apt_get, ["install", "-y", "prometheus-node-exporter", "dkms"])
    first = (host / "var/lib/fakehost/dpkg-installed").read_bytes()
    other = seed_kpro5(tmp_path / "other")
    monkeypatch.setenv("GPUHOSTS_HOST_ROOT", str(other))
    quietly(system.cmd_apt_get, ["install", "-y", "dkms"])
    quietly(system.cmd_apt_get, ["install", "-y", "prometheus-node-exporter"])
    assert (other / "var/lib/fakehost/dpkg-installed").read_bytes() == first
    assert first.decode().split() == sorted(first.decode().split())


@pytest.mark.parametrize("argv, words", [
    (["install", "-y", "datacenter-gpu-manager-exporter=9.9.9-1"],
     "E: Version '9.9.9-1' for 'datacenter-gpu-manager-exporter' was not found"),
])
def test_a_version_the_repository_lacks_is_refused_as_apt_does(host, argv, words):
    with pytest.raises(Fail) as error:
        quietly(system.cmd_apt_get, argv)
    assert words in str(error.value)


def test_a_held_version_is_installed_and_a_downgrade_needs_allow_downgrades(host):
    quietly(system.cmd_apt_get, ["install", "-y", "datacenter-gpu-manager-exporter=4.9.0-1"])
    assert system.pkg_version("datacenter-gpu-manager-exporter", host) == "4.9.0-1"
    with pytest.raises(Fail) as error:
        quietly(system.cmd_apt_get, ["install", "-y", "datacenter-gpu-manager-exporter=4.8.2-1"])
    assert "--allow-downgrades" in str(error.value)
    quietly(system.cmd_apt_get, ["install", "-y", "--allow-downgrades", "datacenter-gpu-manager-exporter=4.8.2-1"])
    assert system.pkg_version("datacenter-gpu-manager-exporter", host) == "4.8.2-1"
    quietly(system.cmd_apt_get, ["purge", "-y", "datacenter-gpu-manager-exporter"])
    assert not (host / system.VERSIONS_FILE).exists() and os.path.exists(host / "var/lib/fakehost/dpkg-installed")
