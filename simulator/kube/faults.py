"""Fault rules: answer 5xx (or 429), answer slowly, answer 409 Conflict, or expire a watch, on demand.

Used by the fault proxy in front of the real API server (``simulator/kube/proxy.py``). Deterministic by default: counts
(``status_5xx_next: 2`` = the next two matching requests fail), not probabilities.
``status_5xx_rate`` exists for soak tests and draws from a seeded RNG, so a run is reproducible.
Rules match on the request path (fnmatch globs, e.g. ``/api/v1/nodes/*``) and optionally the
method; a rule with no ``paths`` matches every path. A watch is a GET with ``watch=true``.

Rules are set from a test thread and consulted from the proxy's event loop, so every read and
change of the counters happens under one lock.
"""

from __future__ import annotations

import fnmatch
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HTTP_METHODS = frozenset({"GET", "HEAD", "OPTIONS", *WRITE_METHODS})
FIRED_KEYS = ("5xx", "conflict", "delayed", "expired")


class InvalidFaultRule(ValueError):
    """A fault rule that does not validate; the message names each offending field."""


class FaultSpec(BaseModel):
    """One rule, as given to ``FaultProxy.set_faults``."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(default_factory=list, description="fnmatch globs on the URL path; empty = all")
    methods: list[str] = Field(default_factory=list, description="HTTP methods; empty = all")
    status_5xx_next: int = Field(default=0, ge=0, description="the next N matching requests fail")
    status_5xx_rate: float = Field(default=0.0, ge=0.0, le=1.0, description="seeded-random share that fails")
    status_code: int = Field(default=500, description="500-599, or 429 (what API Priority and Fairness sends)")
    delay_ms: int = Field(default=0, ge=0, le=120_000, description="every matching request waits this long")
    conflict_next: int = Field(default=0, ge=0, description="the next N matching writes answer 409 Conflict")
    retry_after_s: int | None = Field(default=None, ge=0, description="Retry-After header on 5xx/429 answers")
    expire_watches_next: int = Field(default=0, ge=0, description="the next N matching watches get 410 Expired")

    @field_validator("paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith(("/", "*")):
                raise ValueError(f"{path!r} is not a URL path glob (it must start with '/' or '*')")
        return paths

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, methods: list[str]) -> list[str]:
        upper = [m.upper() for m in methods]
        unknown = sorted(set(upper) - HTTP_METHODS)
        if unknown:
            raise ValueError(f"unknown HTTP method(s) {unknown}; expected some of {sorted(HTTP_METHODS)}")
        return upper

    @field_validator("status_code")
    @classmethod
    def _error_code(cls, code: int) -> int:
        if code != 429 and not 500 <= code <= 599:
            raise ValueError(f"{code} is not a server error: use 500-599 or 429")
        return code


@dataclass
class Fault:
    spec: FaultSpec
    remaining_5xx: int = 0
    remaining_conflicts: int = 0
    remaining_expiries: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.spec.methods and method.upper() not in self.spec.methods:
            return False
        return not self.spec.paths or any(fnmatch.fnmatchcase(path, p) for p in self.spec.paths)


@dataclass
class Decision:
    """What the fault layer wants done with one request."""

    delay_s: float = 0.0
    error_status: int | None = None
    retry_after_s: int | None = None
    conflict: bool = False
    expire_watch: bool = False


def parse_rules(payload: Any) -> list[FaultSpec]:
    """A single rule object, ``{"rules": [...]}``, or a list of rules -> validated specs."""
    if isinstance(payload, FaultSpec):
        return [payload]
    if isinstance(payload, dict) and set(payload) == {"rules"}:
        payload = payload["rules"]
    items = payload if isinstance(payload, list) else [payload]
    specs = []
    for index, item in enumerate(items):
        if isinstance(item, FaultSpec):
            specs.append(item)
            continue
        try:
            specs.append(FaultSpec.model_validate(item))
        except ValidationError as exc:
            where = f"rule {index}: " if len(items) > 1 else ""
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'rule'}: {err['msg']}" for err in exc.errors()
            )
            raise InvalidFaultRule(f"invalid fault rule: {where}{problems}") from None
    return specs


@dataclass
class Faults:
    seed: int = 0
    rules: list[Fault] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIRED_KEYS, 0))

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def set_rules(self, payload: Any) -> None:
        """Replace the rules; raises :class:`InvalidFaultRule` (and keeps the old rules) on bad input."""
        specs = parse_rules(payload)
        with self._lock:
            self.rules = [Fault(s, s.status_5xx_next, s.conflict_next, s.expire_watches_next) for s in specs]
            self._rng = random.Random(self.seed)

    def clear(self) -> None:
        """No rules (the counters keep counting)."""
        with self._lock:
            self.rules = []

    def reset_counts(self) -> None:
        with self._lock:
            self.fired = dict.fromkeys(FIRED_KEYS, 0)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.fired)

    def decide(self, method: str, path: str, *, watch: bool = False) -> Decision:
        decision = Decision()
        method = method.upper()
        with self._lock:
            for rule in self.rules:
                if not rule.matches(method, path):
                    continue
                decision.delay_s = max(decision.delay_s, rule.spec.delay_ms / 1000)
                if decision.error_status is not None or decision.conflict or decision.expire_watch:
                    continue  # one injected answer per request; later rules only add delay
                if rule.remaining_5xx > 0:
                    rule.remaining_5xx -= 1
                    decision.error_status, decision.retry_after_s = rule.spec.status_code, rule.spec.retry_after_s
                elif rule.spec.status_5xx_rate and self._rng.random() < rule.spec.status_5xx_rate:
                    decision.error_status, decision.retry_after_s = rule.spec.status_code, rule.spec.retry_after_s
                elif rule.remaining_conflicts > 0 and method in WRITE_METHODS:
                    rule.remaining_conflicts -= 1
                    decision.conflict = True
                elif rule.remaining_expiries > 0 and watch:
                    rule.remaining_expiries -= 1
                    decision.expire_watch = True
            if decision.error_status is not None:
                self.fired["5xx"] += 1
            if decision.conflict:
                self.fired["conflict"] += 1
            if decision.expire_watch:
                self.fired["expired"] += 1
            if decision.delay_s:
                self.fired["delayed"] += 1
        return decision

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "rules": [{**r.spec.model_dump(), "remaining_5xx": r.remaining_5xx,
                           "remaining_conflicts": r.remaining_conflicts,
                           "remaining_expiries": r.remaining_expiries} for r in self.rules],
                "fired": dict(self.fired),
            }
