"""Bad input as data: what every parser returns beside its good records.

The brief's rule is that bad input never crashes a run and is never silently dropped. Parsers
therefore return a :class:`Parsed` holding the valid records *and* the rejected pieces with the
reason, and the asset writes the rejects to ``ops.quarantine``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Quarantined payloads are cut to this size so one 50 MB garbage answer cannot bloat the
# table; the original length is kept in the context.
MAX_QUARANTINE_PAYLOAD = 64 * 1024


class CollectionStatus(StrEnum):
    """Per device and run, in ``ops.collection_status``."""

    OK = "ok"
    PARTIAL = "partial"  # some rows quarantined, the rest landed
    TIMEOUT = "timeout"
    AUTH_FAILURE = "auth_failure"
    UNREACHABLE = "unreachable"
    NO_DATA = "no_data"  # answered, but had nothing (e.g. an empty LLDP table)
    INVALID = "invalid"  # answered with nothing usable; everything quarantined
    ERROR = "error"


@dataclass
class LandingTally:
    """A collection run's counts as its asset reports them: devices by status, rows landed and
    rows quarantined, added up as each device lands."""

    statuses: Counter[str] = field(default_factory=Counter)
    landed: int = 0
    quarantined: int = 0

    def add(self, status: CollectionStatus, landed: int, quarantined: int) -> None:
        self.statuses[str(status)] += 1
        self.landed += landed
        self.quarantined += quarantined

    def counts(self) -> dict[str, Any]:
        return {
            "devices": sum(self.statuses.values()),
            "statuses": dict(self.statuses),
            "neighbors": self.landed,
            "quarantined": self.quarantined,
        }


@dataclass(frozen=True)
class Quarantined:
    """One rejected piece of input and why."""

    source: str
    reason: str
    payload: str | bytes
    device: str | None = None
    location: str | None = None  # e.g. "line 14" or an OID
    context: dict[str, Any] = field(default_factory=dict)

    def clipped_payload(self) -> tuple[str, bytes | None]:
        """Text for humans plus the raw bytes when the payload was not valid UTF-8."""
        if isinstance(self.payload, str):
            return self.payload[:MAX_QUARANTINE_PAYLOAD], None
        text = self.payload.decode("utf-8", errors="backslashreplace")
        try:
            self.payload.decode("utf-8")
            raw: bytes | None = None  # valid UTF-8: the text column says it all
        except UnicodeDecodeError:
            raw = self.payload[:MAX_QUARANTINE_PAYLOAD]
        return text[:MAX_QUARANTINE_PAYLOAD], raw


@dataclass
class Parsed(Generic[T]):
    """Records that passed plus everything that did not, in input order."""

    records: list[T] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)

    @property
    def status(self) -> CollectionStatus:
        if self.records and self.quarantined:
            return CollectionStatus.PARTIAL
        if self.records:
            return CollectionStatus.OK
        return CollectionStatus.INVALID if self.quarantined else CollectionStatus.NO_DATA
