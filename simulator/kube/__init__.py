"""Kubernetes API twin: an HTTP server the official ``kubernetes`` client works against unchanged.

Serves Nodes (with GPU Feature Discovery labels and ``nvidia.com/gpu`` capacity from the ground
truth), Pods, Leases, Namespaces and the Kueue v1beta2 CRDs, with resourceVersion conflicts,
strategic/merge/JSON patch, server-side apply with ``managedFields``, ``dryRun=All``, label and
field selectors, watch, CRD schema + CEL validation, and fault switches. ``start`` is the
``sim up`` entry point; see ``docs/architecture.md`` ("Kubernetes API twin") for the decisions.
"""

from simulator.kube.twin import KubeTwinAdmin, start

__all__ = ["KubeTwinAdmin", "start"]
