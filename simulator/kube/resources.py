"""The kinds the twin serves and what is special about each (scope, status subresource, checks).

Core kinds (Node, Pod, Namespace, Lease) get the few API-server checks the twin's callers can
trip over: object names, label and annotation syntax, a pod needs containers with names and
images, pod specs are immutable except the fields upstream lets change. Full core validation
(kubernetes-validate) is not in the lock; everything else in a core object is accepted as sent.
Kueue kinds are validated against their CRDs (:mod:`simulator.kube.crds`).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from simulator.kube.crds import CrdSchema, load_crds
from simulator.kube.errors import Cause
from simulator.kube.selectors import label_key_error, label_value_error, name_error

MAX_ANNOTATIONS_BYTES = 256 * 1024  # apimachinery TotalAnnotationSizeLimitB


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool
    short_names: tuple[str, ...] = ()
    crd: CrdSchema | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None) -> tuple[list[Cause], list[str]]:
        """Kind-specific checks after the generic metadata checks; (errors, warnings)."""
        causes = metadata_causes(obj, dns_label=self.kind == "Namespace")
        warnings: list[str] = []
        if self.crd is not None:
            crd_causes, warnings = self.crd.validate(obj, old)
            causes += crd_causes
        elif self.kind == "Pod":
            causes += _pod_causes(obj, old)
        return causes, warnings


def metadata_causes(obj: dict[str, Any], *, dns_label: bool = False) -> list[Cause]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [Cause("FieldValueRequired", "Required value", "metadata")]
    out: list[Cause] = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        out.append(Cause("FieldValueRequired", "Required value: name or generateName is required", "metadata.name"))
    elif problem := name_error(name, dns_label=dns_label):
        out.append(Cause("FieldValueInvalid", f"Invalid value: {json.dumps(name)}: {problem}", "metadata.name"))
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            out.append(Cause("FieldValueTypeInvalid", "must be a map of string to string", "metadata.labels"))
        else:
            for key, value in labels.items():
                if problem := label_key_error(key):
                    out.append(Cause("FieldValueInvalid", f"Invalid value: {json.dumps(key)}: {problem}",
                                     "metadata.labels"))
                if not isinstance(value, str):
                    out.append(Cause("FieldValueTypeInvalid", f"Invalid value: {json.dumps(value)}: must be a string",
                                     f"metadata.labels.{key}"))
                elif problem := label_value_error(value):
                    out.append(Cause("FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {problem}",
                                     "metadata.labels"))
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            out.append(Cause("FieldValueTypeInvalid", "must be a map of string to string", "metadata.annotations"))
        else:
            for key in annotations:
                if problem := label_key_error(key):
                    out.append(Cause("FieldValueInvalid", f"Invalid value: {json.dumps(key)}: {problem}",
                                     "metadata.annotations"))
            if sum(len(k) + len(v) for k, v in annotations.items()) > MAX_ANNOTATIONS_BYTES:
                out.append(Cause("FieldValueTooLong", "Too long: must have at most 262144 bytes",
                                 "metadata.annotations"))
    finalizers = meta.get("finalizers")
    if finalizers is not None and (not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)):
        out.append(Cause("FieldValueTypeInvalid", "must be a list of strings", "metadata.finalizers"))
    return out


# Pod spec fields an update may change (k8s.io/kubernetes pkg/apis/core/validation ValidatePodUpdate).
_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")


def _pod_causes(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "Required value", "spec")]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [Cause("FieldValueRequired", "Required value", "spec.containers")]
    out: list[Cause] = []
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            out.append(Cause("FieldValueRequired", "Required value", f"spec.containers[{i}].name"))
        if not isinstance(c, dict) or not c.get("image"):
            out.append(Cause("FieldValueRequired", "Required value", f"spec.containers[{i}].image"))
    if old is not None and not out:

        def masked(s: dict[str, Any]) -> dict[str, Any]:
            s = copy.deepcopy(s)
            for key in _POD_MUTABLE:
                s.pop(key, None)
            for group in ("containers", "initContainers"):
                for c in s.get(group) or []:
                    if isinstance(c, dict):
                        c.pop("image", None)
            return s

        new_spec, old_spec = masked(spec), masked(old.get("spec") or {})
        if not old_spec.get("nodeName"):
            new_spec.pop("nodeName", None)  # binding a pending pod sets nodeName once
            old_spec.pop("nodeName", None)
        if new_spec != old_spec:
            out.append(Cause("FieldValueForbidden", "Forbidden: pod updates may not change fields other than "
                             "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                             "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                             "tolerations), `spec.terminationGracePeriodSeconds`", "spec"))
    return out


def builtin_resources() -> list[Resource]:
    return [
        Resource("", "v1", "nodes", "Node", namespaced=False, status_subresource=True, short_names=("no",)),
        Resource("", "v1", "pods", "Pod", namespaced=True, status_subresource=True, short_names=("po",)),
        Resource("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True,
                 short_names=("ns",)),
        Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True, status_subresource=False),
    ]


def all_resources() -> list[Resource]:
    out = builtin_resources()
    for crd in load_crds():
        out.append(Resource(crd.group, crd.version, crd.plural, crd.kind, crd.namespaced, crd.status_subresource,
                            tuple(crd.short_names), crd))
    return out
