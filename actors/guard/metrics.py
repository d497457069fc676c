"""Reading a run's metrics for the alert rules (`actors.guard.alerts.RunMetrics`): the adapter side.

* Consumer lag, per consumer group of the run (`<run>.trialog-*`, the bare `trialog-*` for the default run):
  the end offset of each partition the group has committed an offset on, minus that offset, summed. Read
  from the broker (committed offsets and end offsets), so it covers every worker, running or not, and
  needs no worker's cooperation: a stuck or dead group is exactly the one whose lag grows.
* Sandbox acquire latency: the sandbox workers record it only as a Prometheus histogram
  (`trialog.sandbox.acquire.duration`, served as `trialog_sandbox_acquire_duration_seconds`); no event
  carries it (`StepExecuted.duration_us` is the command's own time, restore and acquire excluded). So the
  guard scrapes the workers' `/metrics` endpoints it is given (`--sandbox-metrics URL`, one per worker):
  a cumulative histogram per worker, whose differences over a window the engine turns into a p95. Adding a
  field to StepExecuted would have been a schema version for a number only the guard reads.
"""

from __future__ import annotations

import logging
import math
import re
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from actors.guard.alerts import Histogram, RunMetrics
from schemas.topics import topic_name

log = logging.getLogger(__name__)

ACQUIRE_METRIC = "trialog_sandbox_acquire_duration_seconds"
GROUP_STEM = "trialog-"
SCRAPE_TIMEOUT_S = 2.0
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def read_metrics(
    bootstrap: str, run: str, sandbox_metrics: Iterable[str] = (), timeout_s: float = 10.0
) -> RunMetrics:
    """One reading: the lag of the run's consumer groups, and the acquire histogram of each sandbox worker
    whose metrics URL answers (one that does not is logged and left out of this reading)."""
    return RunMetrics(consumer_lags(bootstrap, run, timeout_s), scrape_acquire(sandbox_metrics))


def run_groups(groups: Iterable[str], run: str) -> list[str]:
    """The consumer groups of `run` among `groups`: `<run>.trialog-*` (the bare `trialog-*` for "")."""
    prefix = topic_name(run, GROUP_STEM)
    return sorted(group for group in groups if group.startswith(prefix))


def consumer_lags(bootstrap: str, run: str, timeout_s: float = 10.0) -> dict[str, int]:
    """Records behind per consumer group of `run` (groups that committed nothing are left out)."""
    from kafka.admin import OffsetSpec

    from streams.kafka import clients

    admin = clients.admin(
        bootstrap,
        client_id="trialog-guard-lag",
        request_timeout_ms=int(timeout_s * 1000),
        bootstrap_timeout_ms=int(timeout_s * 1000),
    )
    try:
        listed: list[Any] = admin.list_groups()
        groups = run_groups((_group_id(entry) for entry in listed), run)
        if not groups:
            return {}
        committed: Mapping[str, Mapping[Any, Any]] = admin.list_group_offsets(
            {group: None for group in groups}
        )
        partitions = {tp for offsets in committed.values() for tp in offsets}
        ends = (
            admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions}) if partitions else {}
        )
        return lags(committed, {tp: end.offset for tp, end in ends.items()})
    finally:
        admin.close()


def lags(committed: Mapping[str, Mapping[Any, Any]], ends: Mapping[Any, int]) -> dict[str, int]:
    """Per group, the sum over its partitions of end offset minus committed offset (never below 0);
    a partition without a committed offset (-1) or an end is skipped."""
    out = {}
    for group, offsets in committed.items():
        behind = [
            max(0, ends[tp] - meta.offset) for tp, meta in offsets.items() if meta.offset >= 0 and tp in ends
        ]
        if behind:
            out[group] = sum(behind)
    return out


def _group_id(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return str(entry.get("group_id") or entry.get("group", ""))
    return str(entry[0])  # kafka-python 2's (group_id, protocol_type)


def scrape_acquire(urls: Iterable[str], timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, Histogram]:
    found = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                text = answer.read().decode("utf-8", "replace")
        except OSError as exc:
            log.warning("sandbox metrics at %s not readable: %s", url, exc)
            continue
        histogram = parse_histogram(text, ACQUIRE_METRIC)
        if histogram is not None:
            found[url] = histogram
    return found


def parse_histogram(page: str, name: str) -> Histogram | None:
    """The histogram `name` of a Prometheus text page, its label sets summed per bucket (None when the page
    has no bucket of it: the worker has not acquired a sandbox yet)."""
    buckets: dict[float, int] = {}
    for line in page.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != f"{name}_bucket":
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        if "le" not in labels:
            continue
        bound = math.inf if labels["le"] in ("+Inf", "Inf", "inf") else float(labels["le"])
        buckets[bound] = buckets.get(bound, 0) + int(float(match["value"]))
    if not buckets:
        return None
    bounds = tuple(sorted(buckets))
    return Histogram(bounds, tuple(buckets[bound] for bound in bounds))
