"""The content record of what a unit wrote (templates/common/content.sh.j2), run by bash over real files: a refresh
sees a change of size or within the sampled MiB, the deep check any byte; files added since are not the unit's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuhosts.render import render

MIB = 1024 * 1024


def state(directory: Path, *args: str) -> str:
    script = render("common/content.sh.j2") + '\ncontent_state "$@"\n'
    done = subprocess.run(["bash", "-c", script, "content", str(directory), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def record(directory: Path) -> None:
    script = render("common/content.sh.j2") + '\ncontent_record "$1"\n'
    subprocess.run(["bash", "-c", script, "content", str(directory)], check=True, timeout=60)


def flip(path: Path, at: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0x01]))


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A tokenized data set as prepare_data.py leaves it: a large shard, a small one, its json, gpuhosts' markers."""
    shards = tmp_path / "tokenized"
    (shards / "train").mkdir(parents=True)
    (shards / "data-00000-of-00002.arrow").write_bytes(bytes(range(256)) * (18 * 1024))  # 4.5 MiB
    (shards / "train/data-00001-of-00002.arrow").write_bytes(b"small shard " * 100)
    (shards / "dataset_info.json").write_text('{"features": {}}\n')
    (shards / ".gpuhosts-prepare").write_text("key\n")
    record(shards)
    return shards


# (change, the refresh's state, the deep check's state)
CASES = {
    "nothing": (lambda d: None, "as recorded", "as recorded"),
    "a byte outside the samples": (lambda d: flip(d / "data-00000-of-00002.arrow", 1280 * 1024), "as recorded",
                                   "data-00000-of-00002.arrow: sha256"),
    "a byte in the first MiB": (lambda d: flip(d / "data-00000-of-00002.arrow", 10), "data-00000-of-00002.arrow: "
                                "sampled sha256", "data-00000-of-00002.arrow: sha256"),
    "a small file edited": (lambda d: flip(d / "train/data-00001-of-00002.arrow", 3),
                            "train/data-00001-of-00002.arrow: sampled sha256", "train/data-00001-of-00002.arrow: sha256"),
    "a shard cut short": (lambda d: (d / "dataset_info.json").write_text("{}\n"), "dataset_info.json: 3 bytes, "
                          "recorded 17", "dataset_info.json: 3 bytes, recorded 17"),
    "a shard removed": (lambda d: (d / "train/data-00001-of-00002.arrow").unlink(),
                        "train/data-00001-of-00002.arrow missing", "train/data-00001-of-00002.arrow missing"),
    # the datasets library writes its cache files beside the data it loads: not the unit's content
    "a cache file added": (lambda d: (d / "cache-1234.arrow").write_bytes(b"x"), "as recorded", "as recorded"),
    "a marker rewritten": (lambda d: (d / ".gpuhosts-prepare").write_text("other\n"), "as recorded", "as recorded"),
    "the record removed": (lambda d: (d / ".gpuhosts-content").unlink(), "no record", "no record"),
}


@pytest.mark.parametrize("change", CASES)
def test_refresh_and_deep_check_see_what_changed(written: Path, change: str):
    tamper, refresh, deep = CASES[change]
    tamper(written)
    assert state(written).startswith(refresh)
    assert state(written, "deep").startswith(deep)


def test_a_directory_that_is_gone(tmp_path: Path):
    assert state(tmp_path / "absent") == "missing"


def test_the_record_names_every_file_once_by_its_digests(written: Path):
    lines = (written / ".gpuhosts-content").read_text().splitlines()
    paths = [line.split(" ", 3)[3] for line in lines]
    assert paths == ["data-00000-of-00002.arrow", "dataset_info.json", "train/data-00001-of-00002.arrow"]
    sha256, sampled, size = lines[0].split(" ")[:3]
    assert (len(sha256), len(sampled), int(size)) == (64, 16, 18 * 1024 * 256)
