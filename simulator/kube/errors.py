"""Kubernetes ``Status`` errors: every failure the twin answers is one of these, never a traceback.

The official client turns any non-2xx answer into ``ApiException(status=code)`` and callers branch
on ``e.status`` and on the ``reason`` in the body (``AlreadyExists`` vs ``Conflict`` share 409), so
the twin must use the same code *and* reason the real API server uses for each situation
(k8s.io/apimachinery/pkg/api/errors).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One ``details.causes`` entry: which field is wrong and why (e.g. ``FieldValueInvalid``)."""

    reason: str
    message: str
    field: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {"reason": self.reason, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass
class ApiError(Exception):
    """An error answer: HTTP ``code`` plus the ``reason``/``message``/``details`` of a Status."""

    code: int
    reason: str
    message: str
    name: str = ""
    kind: str = ""
    group: str = ""
    causes: list[Cause] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details())

    def details(self) -> dict[str, Any] | None:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.as_dict() for c in self.causes]
        return details or None


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``meta/v1 Status`` as the API server writes it (``status: Failure`` for every error)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 300 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _qualified(resource: str, group: str) -> str:
    # The server names CRD-backed resources with their group: clusterqueues.kueue.x-k8s.io "x".
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found', name, resource, group)


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{_qualified(resource, group)} "{name}" already exists', name, resource, group
    )


def conflict(resource: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        name,
        resource,
        group,
    )


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid, message ``Kind.group "name" is invalid: [field: reason, ...]`` like the server."""
    parts = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', name, kind, group, causes)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    # Watch and list with an expired resourceVersion answer reason "Expired" (apimachinery NewResourceExpired).
    return ApiError(410, "Expired", message)
