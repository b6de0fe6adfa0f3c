"""Fault switches: make the twin answer 5xx, answer slowly, or answer 409 Conflict on demand.

Deterministic by default: counts (``status_5xx_next: 2`` = the next two matching requests fail),
not probabilities. ``status_5xx_rate`` exists for soak tests and draws from a seeded RNG, so a
run is reproducible. Rules match on the request path (fnmatch globs, e.g.
``/api/v1/nodes/*``) and optionally the method; a rule with no ``paths`` matches every API path
(admin ``/_twin/`` paths never match, so a test can always switch faults off again).
"""

from __future__ import annotations

import fnmatch
import random
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.kube.errors import bad_request

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class FaultSpec(BaseModel):
    """One rule as accepted by ``POST /_twin/faults`` and the start-up config."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(default_factory=list, description="fnmatch globs on the URL path; empty = all")
    methods: list[str] = Field(default_factory=list, description="HTTP methods; empty = all")
    status_5xx_next: int = Field(default=0, ge=0, description="the next N matching requests fail")
    status_5xx_rate: float = Field(default=0.0, ge=0.0, le=1.0, description="seeded-random share that fails")
    status_code: int = Field(default=500, ge=500, le=599)
    delay_ms: int = Field(default=0, ge=0, le=120_000, description="every matching request waits this long")
    conflict_next: int = Field(default=0, ge=0, description="the next N matching writes answer 409 Conflict")
    retry_after_s: int | None = Field(default=None, ge=0, description="Retry-After header on 5xx answers")


@dataclass
class Fault:
    spec: FaultSpec
    remaining_5xx: int = 0
    remaining_conflicts: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.spec.methods and method.upper() not in {m.upper() for m in self.spec.methods}:
            return False
        return not self.spec.paths or any(fnmatch.fnmatchcase(path, p) for p in self.spec.paths)


@dataclass
class Decision:
    """What the fault layer wants done with one request."""

    delay_s: float = 0.0
    error_status: int | None = None
    retry_after_s: int | None = None
    conflict: bool = False


@dataclass
class Faults:
    seed: int = 0
    rules: list[Fault] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=lambda: {"5xx": 0, "conflict": 0, "delayed": 0})

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def configure(self, payload: Any) -> None:
        """Replace the rules: a single rule object, ``{"rules": [...]}``, or a list of rules."""
        if isinstance(payload, dict) and "rules" in payload:
            payload = payload["rules"]
        items = payload if isinstance(payload, list) else [payload]
        try:
            specs = [FaultSpec.model_validate(item) for item in items]
        except ValidationError as exc:
            raise bad_request(f"invalid fault rule: {exc.errors(include_url=False)}") from None
        self.rules = [Fault(s, s.status_5xx_next, s.conflict_next) for s in specs]
        self._rng = random.Random(self.seed)

    def clear(self) -> None:
        self.rules = []

    def decide(self, method: str, path: str) -> Decision:
        decision = Decision()
        for rule in self.rules:
            if not rule.matches(method, path):
                continue
            decision.delay_s = max(decision.delay_s, rule.spec.delay_ms / 1000)
            if decision.error_status is None and decision.conflict is False:
                if rule.remaining_5xx > 0:
                    rule.remaining_5xx -= 1
                    decision.error_status, decision.retry_after_s = rule.spec.status_code, rule.spec.retry_after_s
                elif rule.spec.status_5xx_rate and self._rng.random() < rule.spec.status_5xx_rate:
                    decision.error_status, decision.retry_after_s = rule.spec.status_code, rule.spec.retry_after_s
                elif rule.remaining_conflicts > 0 and method.upper() in WRITE_METHODS:
                    rule.remaining_conflicts -= 1
                    decision.conflict = True
        if decision.error_status is not None:
            self.fired["5xx"] += 1
        if decision.conflict:
            self.fired["conflict"] += 1
        if decision.delay_s:
            self.fired["delayed"] += 1
        return decision

    def describe(self) -> dict[str, Any]:
        return {
            "rules": [{**r.spec.model_dump(), "remaining_5xx": r.remaining_5xx,
                       "remaining_conflicts": r.remaining_conflicts} for r in self.rules],
            "fired": dict(self.fired),
        }

