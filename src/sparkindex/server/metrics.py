"""``/metrics``: Prometheus metrics read from the coordination store at scrape time.

Executors are short-lived Python processes on other machines; nobody can scrape them. Everything
they do ends up in the store (claims, counts, states, timings), so one collector turns the store
into metrics when Prometheus asks. Counters are totals over the jobs the store still holds: a
``gc`` of old jobs lowers them, which Prometheus reads as a counter reset. The partition metrics
of Data Prepper's source coordination (its nodes share partitions of work through a store, as
sparkindex's workers do) keep their names, in snake_case with a ``sparkindex_`` prefix, except
where Prometheus's conventions forbid them (``promtool check metrics``): their HELP text names
Data Prepper's.

Bulk latency (as the partition workers timed their requests, over recent jobs) and Data Prepper's
partition_not_found / partition_update error counts come from the store too: the workers record
them on their partitions and jobs.

Two collectors share the families: :class:`StoreCollector` is ``serve``'s (every family), and
:class:`GroupCollector` is a sync process's (``sync --metrics-port``: the store's up gauge and the
change-capture families of its own consumer group, under the same names, built by the same
:func:`sync_families`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError

from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.sync_events import SyncEvent
from sparkindex.coordination.views import DURATION_BUCKETS, MetricsSnapshot, SyncConsumer
from sparkindex.server.state import ServerState

log = logging.getLogger(__name__)
DRIFT_KINDS = ("missing", "extra", "stale", "duplicates")


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def coordination_up(answered: bool) -> GaugeMetricFamily:
    up = GaugeMetricFamily("sparkindex_coordination_up", "1 when the coordination store answered this scrape")
    up.add_metric([], 1 if answered else 0)
    return up


class StoreCollector(Collector):
    """``serve``'s collector: every family, from the whole store."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        try:
            snap = self.state.views.metrics()
        except SQLAlchemyError as exc:
            log.warning("metrics: the coordination store did not answer: %s", type(exc).__name__)
            yield coordination_up(False)
            return
        yield coordination_up(True)
        yield from self._jobs_and_partitions(snap)
        yield from self._documents(snap)
        yield from self._live_jobs(snap)
        yield from sync_families(self.state.sync_consumers(), self.state.sync_events())
        yield from self._verify()

    def _jobs_and_partitions(self, snap: MetricsSnapshot) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("sparkindex_jobs", "jobs in the store by state", labels=["status"])
        for job_status in JobStatus:
            jobs.add_metric([str(job_status)], snap.jobs_by_status.get(str(job_status), 0))
        yield jobs
        parts = GaugeMetricFamily("sparkindex_partitions", "partitions in the store by state", labels=["status"])
        for status in PartitionStatus:
            parts.add_metric([str(status)], snap.partitions_by_status.get(str(status), 0))
        yield parts
        # Data Prepper's partitionsCreatedCount and partitionsAcquiredCount lose their "Count": only a
        # histogram's or summary's series may end in _count (promtool check metrics), and a
        # counter named *_created would read as another counter's creation time in OpenMetrics.
        yield _counter(
            "sparkindex_partitions_planned",
            "partitions planned (Data Prepper: partitionsCreatedCount)",
            snap.partitions_created,
        )
        yield _counter(
            "sparkindex_partitions_acquired",
            "claims of partitions by workers (Data Prepper: partitionsAcquired)",
            snap.claims,
        )
        yield GaugeMetricFamily(
            "sparkindex_partitions_held",
            "partitions held by a worker now, PROCESSING (Data Prepper: partitionsAcquiredCount)",
            value=snap.partitions_by_status.get(str(PartitionStatus.PROCESSING), 0),
        )
        yield _counter(
            "sparkindex_partitions_completed",
            "partitions COMPLETED (Data Prepper: partitionsCompleted)",
            snap.partitions_by_status.get(str(PartitionStatus.COMPLETED), 0),
        )
        yield _counter(
            "sparkindex_partitions_closed",
            "times a partition was parked CLOSED, target down (Data Prepper: partitionsClosed)",
            snap.closed,
        )
        yield _counter("sparkindex_partition_retries", "failed partition attempts retried", snap.retries)
        yield _counter(
            "sparkindex_partition_not_found_errors",
            "workers given a partition the store no longer held (Data Prepper: partitionNotFoundErrors)",
            snap.not_found,
        )
        yield _counter(
            "sparkindex_partition_update_errors",
            "partition updates refused: another claim owned it (Data Prepper: partitionUpdateErrors)",
            snap.update_errors,
        )
        hist = HistogramMetricFamily(
            "sparkindex_partition_duration_seconds", "first claim to completion of COMPLETED partitions"
        )
        bounds = [str(b) for b in DURATION_BUCKETS] + ["+Inf"]
        hist.add_metric([], list(zip(bounds, snap.durations, strict=True)), sum_value=snap.duration_sum)
        yield hist
        bulk = HistogramMetricFamily(
            "sparkindex_bulk_latency_seconds",
            "bulk requests to the target as the partition workers timed them (recent jobs)",
        )
        bulk.add_metric([], snap.bulk_latency.cumulative(), sum_value=snap.bulk_latency.total_s)
        yield bulk

    def _documents(self, snap: MetricsSnapshot) -> Iterator[Metric]:
        ok = CounterMetricFamily(
            "sparkindex_documents_indexed", "documents acknowledged by the target", labels=["entity"]
        )
        bad = CounterMetricFamily("sparkindex_documents_failed", "documents that failed permanently", labels=["entity"])
        for entity, (n_ok, n_bad) in sorted(snap.documents.items()):
            ok.add_metric([entity], n_ok)
            bad.add_metric([entity], n_bad)
        yield ok
        yield bad
        letters = GaugeMetricFamily(
            "sparkindex_dead_letters", "dead-lettered documents waiting for a re-drive", labels=["alias", "error_class"]
        )
        for (alias, error_class), n in sorted(snap.dead_letters.items()):
            letters.add_metric([alias, error_class], n)
        yield letters

    def _live_jobs(self, snap: MetricsSnapshot) -> Iterator[Metric]:
        records = GaugeMetricFamily(
            "sparkindex_job_records", "live jobs: estimated and processed rows", labels=["job_id", "entity", "kind"]
        )
        speed = GaugeMetricFamily(
            "sparkindex_job_docs_per_second", "live jobs: documents per second", labels=["job_id"]
        )
        for job, stats in snap.active:
            for entity, s in stats.items():
                records.add_metric([job.id, entity, "total"], s.total)
                records.add_metric([job.id, entity, "processed"], s.processed)
            rate = self.state.tracker.rate(job.id)
            if rate is not None:
                speed.add_metric([job.id], rate)
        yield records
        yield speed

    def _verify(self) -> Iterator[Metric]:
        drift = GaugeMetricFamily(
            "sparkindex_verify_drift", "documents out of step at the alias's last verify", labels=["alias", "kind"]
        )
        when = GaugeMetricFamily(
            "sparkindex_verify_last_run_timestamp_seconds", "when the alias's last verify ended", labels=["alias"]
        )
        for run in self.state.views.verify_runs():
            alias = str(run["alias"])
            for kind in DRIFT_KINDS:
                if isinstance(run.get(kind), int | float):
                    drift.add_metric([alias, kind], run[kind])
            if isinstance(run.get("finished_at"), int | float):
                when.add_metric([alias], run["finished_at"])
        yield drift
        yield when


class GroupCollector(Collector):
    """A sync process's collector (``sync --metrics-port``): the store's up gauge and the
    change-capture families of its own consumer group, named as ``serve`` names them. The jobs,
    partitions and verify families are ``serve``'s alone: a sync process reports what it does."""

    def __init__(self, state: ServerState, group: str) -> None:
        self.state = state
        self.group = group

    def collect(self) -> Iterator[Metric]:
        try:
            events = self.state.store.sync_events.events(self.group)  # also what tells the store answered
            consumers = [c for c in self.state.sync_consumers() if c.group == self.group]
        except SQLAlchemyError as exc:
            log.warning("metrics: the coordination store did not answer: %s", type(exc).__name__)
            yield coordination_up(False)
            return
        yield coordination_up(True)
        yield from sync_families(consumers, events)


def sync_families(consumers: Iterable[SyncConsumer], events: Iterable[SyncEvent]) -> Iterator[Metric]:
    """The change-capture families of *consumers* (a group's position on an alias) and *events*
    (the errors and gaps the syncs counted, per group and kind)."""
    lag = GaugeMetricFamily(
        "sparkindex_sync_lag_seconds",
        "change capture: how far a consumer group is behind",
        labels=["group", "alias"],
    )
    # lag_s is what the sync last wrote; a sync that died stops writing: the age tells.
    age = GaugeMetricFamily(
        "sparkindex_sync_offset_age_seconds",
        "change capture: since a consumer group last saved",
        labels=["group", "alias"],
    )
    applied = CounterMetricFamily(
        "sparkindex_sync_documents_applied", "change capture: documents written", labels=["group", "alias"]
    )
    deleted = CounterMetricFamily(
        "sparkindex_sync_documents_deleted", "change capture: documents deleted", labels=["group", "alias"]
    )
    retained = GaugeMetricFamily(
        "sparkindex_sync_retained_bytes",
        "change capture: log the source retains for a consumer group (a PostgreSQL slot's WAL)",
        labels=["group", "alias"],
    )
    now = time.time()
    for c in consumers:
        labels = [c.group, c.alias or ""]
        if c.lag_s is not None:
            lag.add_metric(labels, c.lag_s)
        if c.updated_at is not None:
            age.add_metric(labels, max(0.0, now - c.updated_at))
        if c.applied is not None:
            applied.add_metric(labels, c.applied)
        if c.deleted is not None:
            deleted.add_metric(labels, c.deleted)
        if c.retained_bytes is not None:
            retained.add_metric(labels, c.retained_bytes)
    yield from (lag, age, applied, deleted, retained)
    errors = CounterMetricFamily(
        "sparkindex_sync_errors",
        "change capture: errors and gaps by kind (source, apply, restart, gap, permanent)",
        labels=["group", "kind"],
    )
    for event in events:
        errors.add_metric([event.group, event.kind], event.count)
    yield errors


def registry_for(state: ServerState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(state))
    return registry


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    return generate_latest(registry), CONTENT_TYPE_LATEST
