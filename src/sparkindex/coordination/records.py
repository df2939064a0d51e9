"""Plain records read from the coordination store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import orjson

from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.keys import load_key

R = TypeVar("R")


def _build(cls: type[R], row: Any, **decoded: Any) -> R:
    """A record from a row: decoded fields as given, every other field the column of its name."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    return cls(**{n: decoded[n] if n in decoded else row[n] for n in names})


@dataclass(frozen=True)
class JobRecord:
    id: str
    aliases: tuple[str, ...]
    status: JobStatus
    config: dict[str, Any]
    targets: dict[str, str]
    run_id: str | None
    total_records: int
    processed_records: int
    success_records: int
    failed_records: int
    created_at: float
    started_at: float | None
    completed_at: float | None
    updated_at: float
    error_message: str | None
    #: identifies the resolved plan and mappings the job was planned from (None: planned before v4)
    fingerprint: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        m = row._mapping
        return _build(
            cls,
            m,
            aliases=tuple(m["alias_key"].split(",")),
            status=JobStatus(m["status"]),
            config=orjson.loads(m["config_json"]),
            targets=orjson.loads(m["targets_json"] or "{}"),
        )


@dataclass(frozen=True)
class PartitionSpec:
    """A partition as the calculator plans it, before it is stored."""

    entity: str
    partition_index: int
    range_start: tuple[Any, ...] | None
    range_end: tuple[Any, ...] | None
    estimated_count: int
    work_units: int
    priority: int


@dataclass(frozen=True)
class PartitionRecord:
    id: str
    job_id: str
    entity: str
    partition_index: int
    range_start: tuple[Any, ...] | None
    range_end: tuple[Any, ...] | None
    estimated_count: int
    work_units: int
    priority: int
    status: PartitionStatus
    cursor: tuple[Any, ...] | None
    processed_count: int
    success_count: int
    failed_count: int
    owner: str | None
    writer: str | None
    run_id: str | None
    claim_token: int
    claims: int
    last_heartbeat: float | None
    last_error: str | None
    retry_count: int
    reopen_at: float | None
    #: bulk latency histogram so far (JSON, :mod:`sparkindex.coordination.latency`)
    bulk_latency: str | None = None
    #: the sealed stages its acknowledged batches went into, comma-separated (staged targets)
    stages: str | None = None

    @property
    def stage_names(self) -> list[str]:
        return [n for n in (self.stages or "").split(",") if n]

    @classmethod
    def from_row(cls, row: Any) -> PartitionRecord:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> PartitionRecord:
        return _build(
            cls,
            m,
            range_start=load_key(m["range_start"]),
            range_end=load_key(m["range_end"]),
            cursor=load_key(m["cursor"]),
            status=PartitionStatus(m["status"]),
        )


@dataclass(frozen=True)
class LockRecord:
    key: str
    job_id: str | None
    holder: str
    token: int
    acquired_at: float
    last_heartbeat: float
    expires_at: float


@dataclass(frozen=True)
class DeadLetter:
    alias: str
    doc_id: str
    job_id: str
    partition_id: str | None
    error_class: str
    error_message: str
    attempts: int
    first_seen: float
    last_seen: float


@dataclass(frozen=True)
class EntityStats:
    entity: str
    total: int
    processed: int
    success: int
    failed: int
    partitions: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "processed": self.processed,
            "success": self.success,
            "failed": self.failed,
            "partitions": self.partitions,
        }

    @property
    def done(self) -> bool:
        open_states = {"PENDING", "PROCESSING", "CLOSED"}
        return not any(self.partitions.get(s, 0) for s in open_states)
