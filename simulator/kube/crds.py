"""Kueue custom resources: schema validation, defaulting, pruning and CEL rules from the real CRDs.

The CRDs are the controller-gen output of Kueue v0.19.2 (``simulator/kube/crds/``, byte-identical
to ``../shared/fixtures/kueue-crds/``; a unit test checks that). Only the ``v1beta2`` (storage)
version is served. For each write the twin does what the API server's CRD handler does, in order:

1. **prune**: drop ``null`` values of non-nullable fields and fields the schema does not know
   (unless ``x-kubernetes-preserve-unknown-fields``); with ``fieldValidation=Strict`` unknown
   fields are an error instead, with the default (``Warn``) they come back as warnings;
2. **default**: fill ``default:`` values of absent properties whose parent object exists;
3. **structural validation** with jsonschema (Draft 4 vocabulary, which OpenAPI v3 schemas use:
   types, required, enum, pattern, min/max, maxItems/maxLength/maxProperties, anyOf for
   int-or-string quantities); ``format`` is not checked; plus ``x-kubernetes-list-type`` ``map``
   and ``set`` uniqueness, which JSON schema cannot say;
4. **CEL** ``x-kubernetes-validations`` with cel-python: rules on ``self``, and transition rules
   on ``oldSelf`` evaluated on update where the old value exists at the same path (object fields
   and ``map`` list items keyed by their map keys correlate; other list items do not, as
   upstream). A rule that is exactly ``self == oldSelf`` (an immutable field) is checked by
   Python equality, so immutability never depends on cel-python. A rule cel-python fails to
   compile is listed in :attr:`CrdSchema.unsupported_rules` and reported as a ``Warning`` on
   every write it would have applied to, never silently passed. A rule that errors at run time
   (e.g. reads a missing field without ``has()``) rejects the object, as upstream does.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

from simulator.kube.errors import Cause

CRD_DIR = Path(__file__).with_name("crds")
SERVED_VERSION = "v1beta2"

Loc = tuple[str | int, ...]


def field_path(loc: Loc) -> str:
    """``("spec", "levels", 0, "nodeLabel")`` -> ``spec.levels[0].nodeLabel`` (upstream style)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


@dataclass
class CelRule:
    rule: str
    message: str
    transition: bool  # refers to oldSelf: evaluated on update only
    immutable: bool  # exactly `self == oldSelf`
    program: Any = None  # celpy Runner, None when unsupported
    error: str = ""


@dataclass
class CrdSchema:
    """One served CRD version: names, scope, status subresource and compiled validation."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    status_subresource: bool
    schema: dict[str, Any]
    short_names: list[str] = field(default_factory=list)
    unsupported_rules: list[str] = field(default_factory=list)
    _validator: Any = None
    _rules: dict[int, list[CelRule]] = field(default_factory=dict)  # id(schema node) -> rules

    def __post_init__(self) -> None:
        self._validator = jsonschema.Draft4Validator(_to_jsonschema(self.schema))
        env = celpy.Environment()
        for loc, node in _walk_schema(self.schema, ()):
            compiled = []
            for spec in node.get("x-kubernetes-validations", []):
                rule = spec["rule"]
                message = spec.get("message") or f"failed rule: {rule}"
                immutable = re.sub(r"\s+", "", rule) == "self==oldSelf"
                cel = CelRule(rule, message, "oldSelf" in rule, immutable)
                if not immutable:
                    try:
                        cel.program = env.program(env.compile(rule))
                    except Exception as exc:  # cel-python raises several types for unsupported syntax
                        cel.error = f"{type(exc).__name__}: {exc}"
                        where = field_path(loc) or "<root>"
                        self.unsupported_rules.append(f"{self.kind} {where}: {rule} ({cel.error})")
                compiled.append(cel)
            if compiled:
                self._rules[id(node)] = compiled

    # -- the pipeline ------------------------------------------------------------------------

    def prepare(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Prune and default a copy of ``obj``; returns it and the unknown fields dropped."""
        obj = copy.deepcopy(obj)
        unknown: list[str] = []
        _prune(self.schema, obj, (), unknown, top=True)
        _default(self.schema, obj)
        return obj, unknown

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None) -> tuple[list[Cause], list[str]]:
        """Structural + CEL validation; returns (field errors, warnings)."""
        causes: list[Cause] = []
        for err in sorted(self._validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
            causes.append(_cause_from_jsonschema(err))
        causes.extend(_list_type_errors(self.schema, obj, ()))
        warnings: list[str] = []
        if not causes:  # upstream skips CEL when the structure is already wrong
            self._cel(self.schema, obj, old, (), causes, warnings)
        return causes, warnings

    def _cel(self, schema: dict[str, Any], value: Any, old: Any, loc: Loc, causes: list[Cause],
             warnings: list[str]) -> None:
        if value is None:
            return
        for rule in self._rules.get(id(schema), []):
            if rule.transition and old is None:
                continue
            path = field_path(loc) or "<root>"
            if rule.immutable:
                if value != old:
                    causes.append(Cause("FieldValueInvalid", f"Invalid value: {_type_name(value)}: {rule.message}",
                                        field_path(loc)))
                continue
            if rule.program is None:
                warnings.append(f"twin could not evaluate CEL rule at {path}: {rule.rule} ({rule.error})")
                continue
            activation = {"self": celpy.json_to_cel(value)}
            if rule.transition:
                activation["oldSelf"] = celpy.json_to_cel(old)
            try:
                result = rule.program.evaluate(activation)
            except Exception as exc:  # evaluation errors reject the object, as upstream does
                result = exc
            if isinstance(result, celpy.celtypes.BoolType):
                if not bool(result):
                    causes.append(Cause("FieldValueInvalid", f"Invalid value: {_type_name(value)}: {rule.message}",
                                        field_path(loc)))
            else:
                causes.append(Cause("FieldValueInvalid", f"rule evaluation error: {rule.rule}: {result}",
                                    field_path(loc)))
        kind = schema.get("type")
        if kind == "object" and isinstance(value, dict):
            for name, sub in (schema.get("properties") or {}).items():
                if name in value:
                    old_sub = old.get(name) if isinstance(old, dict) else None
                    self._cel(sub, value[name], old_sub, (*loc, name), causes, warnings)
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                for name, item in value.items():
                    old_sub = old.get(name) if isinstance(old, dict) else None
                    self._cel(extra, item, old_sub, (*loc, name), causes, warnings)
        elif kind == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
            items = schema["items"]
            keys = schema.get("x-kubernetes-list-map-keys") if schema.get("x-kubernetes-list-type") == "map" else None
            old_by_key: dict[str, Any] = {}
            if keys and isinstance(old, list):
                old_by_key = {_map_key(o, keys): o for o in old if isinstance(o, dict)}
            for i, item in enumerate(value):
                old_item = old_by_key.get(_map_key(item, keys)) if keys and isinstance(item, dict) else None
                self._cel(items, item, old_item, (*loc, i), causes, warnings)


def _type_name(value: Any) -> str:
    # Upstream prints the CEL type for rule failures: `Invalid value: "object": <message>`.
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return json.dumps(names.get(type(value), "null"))


def _map_key(item: dict[str, Any], keys: list[str]) -> str:
    return json.dumps([item.get(k) for k in keys])


def _walk_schema(schema: dict[str, Any], loc: Loc) -> Iterator[tuple[Loc, dict[str, Any]]]:
    yield loc, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk_schema(sub, (*loc, name))
    if isinstance(schema.get("items"), dict):
        yield from _walk_schema(schema["items"], (*loc, 0))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk_schema(schema["additionalProperties"], (*loc, "*"))


_DROP = {"description", "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
         "x-kubernetes-map-type", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
         "x-kubernetes-embedded-resource", "nullable", "default", "format", "example"}


def _to_jsonschema(schema: Any) -> Any:
    """OpenAPI v3 structural schema -> plain JSON schema (nullable becomes a null type)."""
    if isinstance(schema, list):
        return [_to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _to_jsonschema(v) for k, v in value.items()}
        else:
            out[key] = _to_jsonschema(value)
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _cause_from_jsonschema(err: jsonschema.ValidationError) -> Cause:
    loc: Loc = tuple(err.absolute_path)
    if err.validator == "required":
        m = re.match(r"'(.+)' is a required property", err.message)
        name = m.group(1) if m else str(err.validator_value)
        return Cause("FieldValueRequired", "Required value", field_path((*loc, name)))
    value = json.dumps(err.instance)[:200]
    if err.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in err.validator_value)
        return Cause("FieldValueNotSupported", f"Unsupported value: {value}: supported values: {allowed}",
                     field_path(loc))
    if err.validator in ("maxItems", "maxLength", "maxProperties"):
        return Cause("FieldValueTooMany" if err.validator != "maxLength" else "FieldValueTooLong",
                     f"Too many: {value}: must have at most {err.validator_value} items", field_path(loc))
    if err.validator == "type":
        return Cause("FieldValueTypeInvalid", f"Invalid value: {value}: must be of type {err.validator_value}",
                     field_path(loc))
    return Cause("FieldValueInvalid", f"Invalid value: {value}: {err.message}", field_path(loc))


def _list_type_errors(schema: dict[str, Any], value: Any, loc: Loc) -> list[Cause]:
    out: list[Cause] = []
    if isinstance(value, dict) and schema.get("type") == "object":
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                out.extend(_list_type_errors(sub, value[name], (*loc, name)))
        if isinstance(schema.get("additionalProperties"), dict):
            for name, item in value.items():
                out.extend(_list_type_errors(schema["additionalProperties"], item, (*loc, name)))
    elif isinstance(value, list) and schema.get("type") == "array":
        list_type = schema.get("x-kubernetes-list-type")
        seen: set[str] = set()
        for i, item in enumerate(value):
            if list_type == "map" and isinstance(item, dict):
                key = _map_key(item, schema.get("x-kubernetes-list-map-keys", []))
            elif list_type == "set":
                key = json.dumps(item, sort_keys=True)
            else:
                key = None
            if key is not None:
                if key in seen:
                    out.append(Cause("FieldValueDuplicate", f"Duplicate value: {key}", field_path((*loc, i))))
                seen.add(key)
            if isinstance(schema.get("items"), dict):
                out.extend(_list_type_errors(schema["items"], item, (*loc, i)))
    return out


def _prune(schema: dict[str, Any], value: Any, loc: Loc, unknown: list[str], top: bool = False) -> None:
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        for name in list(value):
            sub = props.get(name) if props else (extra if isinstance(extra, dict) else None)
            if value[name] is None and not (sub or {}).get("nullable", False):
                del value[name]  # upstream prunes nulls of non-nullable fields before defaulting
                continue
            if sub is None:
                if top and name in ("apiVersion", "kind", "metadata"):
                    continue
                if not preserve and extra is not True:
                    unknown.append(field_path((*loc, name)))
                    del value[name]
                continue
            if not (top and name == "metadata"):
                _prune(sub, value[name], (*loc, name), unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune(schema["items"], item, (*loc, i), unknown)


def _default(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict) and schema.get("type") == "object":
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _default(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def load_crds(directory: Path = CRD_DIR) -> list[CrdSchema]:
    """Every CRD file in ``directory`` -> its served v1beta2 schema, sorted by plural."""
    out: list[CrdSchema] = []
    for path in sorted(directory.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        version = next((v for v in spec["versions"] if v["name"] == SERVED_VERSION), None)
        if version is None:
            continue
        names = spec["names"]
        out.append(CrdSchema(
            group=spec["group"],
            version=SERVED_VERSION,
            kind=names["kind"],
            plural=names["plural"],
            singular=names.get("singular", names["kind"].lower()),
            namespaced=spec["scope"] == "Namespaced",
            status_subresource="status" in (version.get("subresources") or {}),
            schema=version["schema"]["openAPIV3Schema"],
            short_names=list(names.get("shortNames", [])),
        ))
    return sorted(out, key=lambda c: c.plural)
