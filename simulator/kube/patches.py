"""The three non-apply patch formats: JSON merge (RFC 7386), strategic merge, JSON patch (RFC 6902).

The official Python client sends JSON patch whenever the body is a list and strategic merge for a
dict on built-in kinds (``kubernetes/client/rest.py``), merge patch by default for custom objects;
so all three are reachable from unchanged client code and all three are implemented.

Strategic merge is reduced to what the twin's callers need: maps merge recursively with ``null``
deleting a key (as merge patch); lists whose field name has a known ``patchMergeKey`` upstream
(``containers``/``volumes``/``env`` by ``name``, ``conditions``/``addresses`` by ``type``, ...)
merge item by item on that key, with ``$patch: delete`` removing an item; every other list is
replaced. ``$patch: replace`` on a map replaces it; ``$setElementOrder/`` and ``$retainKeys``
directives are accepted and ignored (ordering is not significant to the twin's callers).
"""

from __future__ import annotations

import copy
from typing import Any

from simulator.kube.errors import ApiError, bad_request

# Field name -> patchMergeKey, from the Go struct tags of k8s.io/api/core/v1 (types.go).
STRATEGIC_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "addresses": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "resourceClaims": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge as described in the module docstring."""
    if isinstance(patch, dict):
        directive = patch.get("$patch")
        if directive == "delete":
            return None
        body = {
            k: v
            for k, v in patch.items()
            if k not in ("$patch", "$retainKeys")
            and not k.startswith(("$setElementOrder/", "$deleteFromPrimitiveList/"))
        }
        if directive == "replace" or not isinstance(target, dict):
            return _strip_directives(body)
        result = copy.deepcopy(target)
        for key, value in body.items():
            if value is None:
                result.pop(key, None)
                continue
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        for key, value in patch.items():
            # `$deleteFromPrimitiveList/<field>: [values]` removes scalars from a primitive list.
            if key.startswith("$deleteFromPrimitiveList/") and isinstance(value, list):
                name = key.split("/", 1)[1]
                if isinstance(result.get(name), list):
                    result[name] = [v for v in result[name] if v not in value]
        return result
    if isinstance(patch, list) and field in STRATEGIC_MERGE_KEYS and isinstance(target, list):
        return _merge_list(target, patch, STRATEGIC_MERGE_KEYS[field])
    return _strip_directives(copy.deepcopy(patch))


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"strategic merge patch: list items need the merge key {key!r}")
        index = next((i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


# --- RFC 6902 JSON patch ------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"json patch: path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _unprocessable(f"json patch: path {path!r} does not exist")
    return node, parts[-1]


def _unprocessable(message: str) -> ApiError:
    # The server answers a JSON patch that cannot be applied with 422 (see apiserver patch.go).
    return ApiError(422, "Invalid", message)


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _unprocessable(f"json patch: path {path!r} does not exist")
    return node


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, _pointer(path), path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _unprocessable(f"json patch: path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-":
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), copy.deepcopy(value))
        else:
            raise _unprocessable(f"json patch: index {last!r} out of range at {path!r}")
    else:
        raise _unprocessable(f"json patch: cannot add below a scalar at {path!r}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) to a copy of ``doc``."""
    if not isinstance(operations, list):
        raise bad_request("json patch: body must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or not isinstance(op.get("path"), str):
            raise bad_request("json patch: each operation needs string 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"json patch: {kind} at {path!r} needs a value")
        if kind == "add":
            doc = _add(doc, path, op["value"])
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, op["value"])
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f"json patch: {kind} needs 'from'")
            value = _remove(doc, source) if kind == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"json patch: test failed at {path!r}")
        else:
            raise bad_request(f"json patch: unknown op {kind!r}")
    return doc
