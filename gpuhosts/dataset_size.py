"""How long a mix's samples are and what its tokenized set takes on disk, estimated at plan time from measurements:

- bytes per token: speculators' own prepare_data.py run over the fixture rows (`make verify-prepare-data`
  writes gpuhosts/measured/speculators-<version>-prepare-data.json: every column it stores, the arrow files' bytes);
- per source, the lengths of its samples: the distribution the dataset publishes (compat-rules.yaml
  `datasetLengths`), else the tokenized lengths of its converter's fixture rows from the same run.

prepare_data.py keeps the first --seq-length tokens of a longer sample (speculators v0.7.0
src/speculators/data_generation/preprocessing.py `_preprocess_batch`: `input_ids[:max_length]`), so a sample stores
min(length, maxSeqLen) tokens, and what lies beyond is never trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gpuhosts.compat_data import dataset_lengths, version_key

MEASURED = Path(__file__).resolve().parent / "measured"


@dataclass(frozen=True)
class Measurement:
    """What one verify run of prepare_data.py measured."""

    version: str
    bytes_per_token: float
    token_bytes: float        # per stored token: input_ids, loss_mask, seq_len
    message_bytes: float      # per token of the whole sample: the messages column, never cut
    lengths: dict[str, tuple[int, ...]]   # converter -> tokenized lengths of its fixture rows
    produced_by: str
    path: Path


def measurement_path(version: str) -> Path:
    return MEASURED / f"speculators-{version}-prepare-data.json"


@lru_cache(maxsize=8)
def measurement(version: str) -> Measurement | None:
    """The measurement of that speculators release, else of the newest release measured (None: none is
    committed); `Measurement.version` says which."""
    path = measurement_path(version)
    if not path.is_file():
        measured = sorted(MEASURED.glob("speculators-*-prepare-data.json"),
                          key=lambda p: version_key(p.name.split("-")[1]))
        if not measured:
            return None
        path = measured[-1]
    data = json.loads(path.read_text())
    return Measurement(version=data["speculators"], bytes_per_token=float(data["bytesPerToken"]),
                       token_bytes=float(data["tokenBytesPerToken"]), message_bytes=float(data["messageBytesPerToken"]),
                       lengths={name: tuple(entry["tokens"]) for name, entry in data["converters"].items()},
                       produced_by=data["producedBy"], path=path)


# A length distribution: (from, upTo, weight) ranges, uniform inside; a measured length L is (L, L, 1/n).
Ranges = tuple[tuple[float, float, float], ...]


def share_over(ranges: Ranges, limit: int) -> float:
    """The share of samples longer than `limit` tokens."""
    total = 0.0
    for low, high, weight in ranges:
        if low == high:
            total += weight if low > limit else 0.0
        elif low >= limit:
            total += weight
        elif high > limit:
            total += weight * (high - limit) / (high - low)
    return total


def whole_tokens(ranges: Ranges) -> float:
    """The mean length of a sample, uncut."""
    return sum(weight * (low + high) / 2 for low, high, weight in ranges)


def stored_tokens(ranges: Ranges, limit: int) -> float:
    """The mean tokens a sample stores once cut at `limit`: E[min(length, limit)]."""
    total = 0.0
    for low, high, weight in ranges:
        if high <= limit:
            total += weight * (low + high) / 2
        elif low >= limit:
            total += weight * limit
        else:
            below = (limit - low) / (high - low)
            total += weight * (below * (low + limit) / 2 + (1 - below) * limit)
    return total


@dataclass(frozen=True)
class SourceLengths:
    index: int
    repo: str
    count: int
    basis: str           # where its lengths come from
    over: float          # share of its samples longer than maxSeqLen
    stored: float        # mean tokens a sample stores
    whole: float         # mean tokens of a sample, uncut (its messages are stored whole)


@dataclass(frozen=True)
class SizeEstimate:
    max_seq_len: int
    policy: str
    sources: tuple[SourceLengths, ...]
    token_bytes: float
    message_bytes: float
    measured: str
    version: str         # the speculators release whose prepare_data.py was measured

    @property
    def samples(self) -> int:
        return sum(s.count for s in self.sources)

    @property
    def over(self) -> float:
        """The share of all samples of the mix longer than maxSeqLen."""
        return sum(s.count * s.over for s in self.sources) / self.samples

    @property
    def tokens(self) -> float:
        return sum(s.count * s.stored for s in self.sources)

    @property
    def size_gb(self) -> float:
        """Token columns per stored token, and the messages column per token of the whole sample: prepare_data.py
        stores a processor verifier's conversation uncut (v0.7.0 `_preprocess_batch`, results["messages"])."""
        return sum(s.count * (s.stored * self.token_bytes + s.whole * self.message_bytes)
                   for s in self.sources) / 1e9


def source_ranges(source, found: Measurement) -> tuple[Ranges, str] | None:
    published = dataset_lengths(source.repo)
    if published is not None:
        total = sum(r.share for r in published.ranges)
        return (tuple((r.from_, r.up_to, r.share / total) for r in published.ranges),
                f"published ({published.tokenizer} tokens): {' '.join(published.source.split())}")
    lengths = found.lengths.get(source.converter)
    if not lengths:
        return None
    return (tuple((n, n, 1 / len(lengths)) for n in lengths),
            f"measured: {len(lengths)} fixture rows of converter {source.converter} tokenized by speculators "
            f"{found.version} prepare_data.py ({found.path.name})")


def dataset_size_gb(training) -> float | None:
    """The data set's size on disk: a pre-made set's declared size, a mix's estimate (None: not derivable)."""
    if training.dataset.size_gb is not None:
        return training.dataset.size_gb
    found = estimate(training)
    return None if found is None else found.size_gb


def estimate(training) -> SizeEstimate | None:
    """The mix's share of samples over maxSeqLen and its tokenized size (None: a pre-made set, or no measurement
    of the pinned speculators release)."""
    dataset = training.dataset
    found = measurement(training.speculators.version)
    if dataset.mix is None or found is None:
        return None
    limit = training.hyper.max_seq_len
    sources = []
    for index, source in enumerate(dataset.mix):
        ranges = source_ranges(source, found)
        if ranges is None:
            return None
        sources.append(SourceLengths(index, source.repo, source.count, ranges[1], share_over(ranges[0], limit),
                                     stored_tokens(ranges[0], limit), whole_tokens(ranges[0])))
    return SizeEstimate(max_seq_len=limit, policy=dataset.long_samples.value, sources=tuple(sources),
                        token_bytes=found.token_bytes, message_bytes=found.message_bytes, measured=f"{found.path.name}: {found.produced_by}",
                        version=found.version)
