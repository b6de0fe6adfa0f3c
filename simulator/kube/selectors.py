"""Label and field selectors, and the label syntax rules the API server enforces on objects.

Label selector grammar follows k8s.io/apimachinery/pkg/labels (equality ``a=b``/``a==b``/``a!=b``,
set-based ``a in (x,y)``/``a notin (x,y)``, existence ``a``/``!a``; requirements are ANDed by
commas). As upstream, ``a!=b`` and ``a notin (...)`` also match objects that lack the label.

Field selectors: upstream supports a fixed list of fields per kind (pods: ``spec.nodeName``,
``status.phase``, ``metadata.name``, ...) and rejects others with 400. The twin accepts any dotted
path into the object (values compared as strings, booleans as ``true``/``false``), which is a
superset: a caller that works here may still be refused by a real server for an exotic field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simulator.kube.errors import bad_request

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(f"^{_NAME}$")
_LABEL_VALUE = re.compile(f"^({_NAME})?$")


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a valid qualified name (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            "name part must consist of at most 63 alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a valid label value (at most 63 chars of ``[-A-Za-z0-9_.]``, alnum ends)."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of at most 63 alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


def name_error(name: str, *, dns_label: bool = False) -> str | None:
    """Object names are RFC 1123 subdomains (namespaces: RFC 1123 labels)."""
    if dns_label:
        if len(name) > 63 or not _DNS_LABEL.match(name):
            return "a lowercase RFC 1123 label must consist of at most 63 lower case alphanumeric characters or '-'"
        return None
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match when the label is absent, as upstream does.
        return not present or labels[self.key] not in self.values


_EXISTS = re.compile(r"^\s*(!?)\s*([^\s=!(),]+)\s*$")
_EQUALITY = re.compile(r"^\s*([^\s=!(),]+)\s*(==|=|!=)\s*([^\s=!(),]*)\s*$")
_SET = re.compile(r"^\s*([^\s=!(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )`` (set values contain commas)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a selector string; an empty one selects everything. Bad syntax -> 400 BadRequest."""
    if not text or not text.strip():
        return []
    out: list[Requirement] = []
    for raw in _split_top_level(text):
        req = _parse_requirement(raw)
        if req is None:
            raise bad_request(f"unable to parse requirement: {raw.strip()!r} in label selector {text!r}")
        for problem in [label_key_error(req.key)] + [label_value_error(v) for v in req.values]:
            if problem:
                raise bad_request(f"invalid label selector {text!r}: {problem}")
        out.append(req)
    return out


def _parse_requirement(raw: str) -> Requirement | None:
    if m := _SET.match(raw):
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        return Requirement(m.group(1), m.group(2), values)
    if m := _EQUALITY.match(raw):
        op = "!=" if m.group(2) == "!=" else "="
        return Requirement(m.group(1), op, frozenset({m.group(3)}))
    if m := _EXISTS.match(raw):
        return Requirement(m.group(2), "!" if m.group(1) else "exists")
    return None


def labels_match(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def parse_field_selector(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """``spec.nodeName=n1,status.phase!=Failed`` -> a predicate on raw objects."""
    if not text or not text.strip():
        return lambda obj: True
    terms: list[tuple[str, bool, str]] = []
    for raw in text.split(","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", raw)
        if m is None:
            raise bad_request(f"invalid field selector {text!r}: {raw.strip()!r} is not field=value or field!=value")
        terms.append((m.group(1), m.group(2) != "!=", m.group(3)))

    def predicate(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in terms)

    return predicate
