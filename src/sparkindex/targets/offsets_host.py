"""The optional capability of keeping consumer offsets in an index of the target.

``sync.offsets: target`` keeps a sync's positions beside its data, in an index of the target
(``sync.offsets_index``). Only backends with indexes to spare offer it (the search engines); a
pipeline asking for it on any other backend is refused by :func:`offsets_host`, naming the setting.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from sparkindex.errors import ConfigError
from sparkindex.targets.base import TargetHandle

if TYPE_CHECKING:
    from sparkindex.coordination.offsets import ConsumerOffsets


class OffsetsHost(ABC):
    """A backend that can keep consumer offsets in an index of its own."""

    @abstractmethod
    def consumer_offsets(self, index: str, namespace: str, retention_s: float, cache_size: int) -> ConsumerOffsets:
        """Consumer offsets kept in an index of this target named *index*, under *namespace*
        (one pipeline's); entries unused for *retention_s* expire, and up to *cache_size* are
        cached."""


def offsets_host(target: TargetHandle) -> OffsetsHost:
    """*target* as a keeper of consumer offsets; :class:`ConfigError` when it cannot be one."""
    if isinstance(target, OffsetsHost):
        return target
    raise ConfigError(
        f"sync.offsets: target: {type(target).__name__} cannot keep consumer offsets in an index of its own; "
        "use sync.offsets: store (the coordination store)"
    )
