"""Plain records read from the coordination store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sparkindex.coordination.states import JobStatus, PartitionStatus


def _key(raw: str | None) -> tuple[Any, ...] | None:
    return None if raw is None else tuple(orjson.loads(raw))


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

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        return cls(
            id=row.id,
            aliases=tuple(row.alias_key.split(",")),
            status=JobStatus(row.status),
            config=orjson.loads(row.config_json),
            targets=orjson.loads(row.targets_json or "{}"),
            run_id=row.run_id,
            total_records=row.total_records,
            processed_records=row.processed_records,
            success_records=row.success_records,
            failed_records=row.failed_records,
            created_at=row.created_at,
            started_at=row.started_at,
            completed_at=row.completed_at,
            updated_at=row.updated_at,
            error_message=row.error_message,
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

    @classmethod
    def from_row(cls, row: Any) -> PartitionRecord:
        return cls(
            id=row.id,
            job_id=row.job_id,
            entity=row.entity,
            partition_index=row.partition_index,
            range_start=_key(row.range_start),
            range_end=_key(row.range_end),
            estimated_count=row.estimated_count,
            work_units=row.work_units,
            priority=row.priority,
            status=PartitionStatus(row.status),
            cursor=_key(row.cursor),
            processed_count=row.processed_count,
            success_count=row.success_count,
            failed_count=row.failed_count,
            owner=row.owner,
            writer=row.writer,
            run_id=row.run_id,
            claim_token=row.claim_token,
            claims=row.claims,
            last_heartbeat=row.last_heartbeat,
            last_error=row.last_error,
            retry_count=row.retry_count,
            reopen_at=row.reopen_at,
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
