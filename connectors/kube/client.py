"""A thin layer over the official ``kubernetes`` client: build an ``ApiClient``, list, apply.

Everything returned is the official client's own types (``ApiClient``, ``V1Node``, ``V1Pod``) or
plain dicts for applied objects, so callers can use the rest of the client directly. Writes go
through server-side apply with our own field manager, which is what lets the publisher touch only
the labels and objects it manages (and remove the ones it stopped publishing) without ever
disturbing labels set by other managers or by hand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

FIELD_MANAGER = "gpufabric"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
PAGE_SIZE = 500
# Retries of an apply the server asked to be retried (429, or a 5xx with Retry-After); as client-go.
MAX_THROTTLE_RETRIES = 5
MAX_RETRY_AFTER_S = 10.0


class KubernetesSourceLike(Protocol):
    """What we need from ``settings.KubernetesSource`` (connectors do not import settings, which sits above them)."""

    @property
    def kubeconfig(self) -> Path | str | None: ...

    @property
    def context(self) -> str | None: ...

    @property
    def in_cluster(self) -> bool: ...

    @property
    def api_url(self) -> str | None: ...


@dataclass(frozen=True)
class ClusterTarget:
    """A cluster named without a site file: what the controllers' flags, tests and benchmarks
    hand to :func:`api_client` (a ``KubernetesSourceLike``)."""

    kubeconfig: Path | str | None = None
    context: str | None = None
    in_cluster: bool = False
    api_url: str | None = None


def api_client(source: KubernetesSourceLike, *, pool: int | None = None) -> client.ApiClient:
    """An ``ApiClient`` for a source: in-cluster, a kubeconfig (+context), a bare URL, or the default.

    ``api_url`` with a kubeconfig overrides the server the kubeconfig names (credentials stay);
    alone it means an unauthenticated endpoint such as ``kubectl proxy``. ``pool``: connections
    kept to the server, for a caller with that many threads (the client's default is 5 per CPU,
    and a thread without a connection waits for one).
    """
    configuration = client.Configuration()
    if pool is not None:
        configuration.connection_pool_maxsize = max(1, pool)
    if source.in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    elif source.kubeconfig is not None or source.context is not None or source.api_url is None:
        config.load_kube_config(
            config_file=str(source.kubeconfig) if source.kubeconfig is not None else None,
            context=source.context,
            client_configuration=configuration,
            persist_config=False,
        )
    if source.api_url is not None:
        configuration.host = str(source.api_url).rstrip("/")
    return client.ApiClient(configuration)


def list_nodes(api: client.ApiClient, label_selector: str | None = None) -> list[client.V1Node]:
    """Every node matching the selector, following ``continue`` pages."""
    core = client.CoreV1Api(api)
    return list(_pages(lambda **kw: core.list_node(label_selector=label_selector or None, **kw)))


def list_pods(
    api: client.ApiClient,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> list[client.V1Pod]:
    """Pods in one namespace (or all), optionally filtered; follows ``continue`` pages."""
    core = client.CoreV1Api(api)
    labels, fields = label_selector or None, field_selector or None
    if namespace is None:
        return list(_pages(lambda **kw: core.list_pod_for_all_namespaces(
            label_selector=labels, field_selector=fields, **kw)))
    return list(_pages(lambda **kw: core.list_namespaced_pod(
        namespace, label_selector=labels, field_selector=fields, **kw)))


def _pages(fetch: Any) -> Iterator[Any]:
    token: str | None = None
    while True:
        page = fetch(limit=PAGE_SIZE, _continue=token) if token else fetch(limit=PAGE_SIZE)
        yield from page.items
        token = page.metadata._continue
        if not token:
            return


# Kinds we write, and where they live. Extending the table is the whole cost of a new kind.
RESOURCE_PATHS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Node"): ("nodes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "ConfigMap"): ("configmaps", True),  # mig-parted configs for mig-manager (issue 21)
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
    ("kueue.x-k8s.io/v1beta2", "Topology"): ("topologies", False),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): ("resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "Cohort"): ("cohorts", False),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"): ("workloadpriorityclasses", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): ("localqueues", True),
}


def object_path(obj: dict[str, Any], subresource: str = "") -> str:
    """The REST path of an object from its apiVersion, kind, name and namespace."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if (api_version, kind) not in RESOURCE_PATHS:
        raise ValueError(f"no REST path known for {api_version}/{kind}; add it to RESOURCE_PATHS")
    plural, namespaced = RESOURCE_PATHS[(api_version, kind)]
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError(f"{kind} needs metadata.name")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        namespace = meta.get("namespace") or "default"
        base += f"/namespaces/{namespace}"
    path = f"{base}/{plural}/{name}"
    return f"{path}/{subresource}" if subresource else path


def apply(
    api: client.ApiClient,
    obj: dict[str, Any],
    *,
    field_manager: str = FIELD_MANAGER,
    force: bool = False,
    dry_run: bool = False,
    subresource: str = "",
) -> dict[str, Any]:
    """Server-side apply ``obj`` as ``field_manager``; returns the object the server answered.

    Fields this manager applied before and omits now are removed by the server (unless another
    manager also owns them). ``force`` takes fields other managers own; leave it off to get a
    409 ``ApiException`` naming the conflicting manager instead. ``dry_run`` is the server's
    ``dryRun=All``: validated, defaulted and admitted (webhooks included) but not stored. An
    answer asking for a retry (429, or 5xx with ``Retry-After``) is retried, as client-go does.
    """
    query: list[tuple[str, str]] = [("fieldManager", field_manager)]
    if force:
        query.append(("force", "true"))
    if dry_run:
        query.append(("dryRun", "All"))
    path = object_path(obj, subresource)
    for attempt in range(MAX_THROTTLE_RETRIES + 1):
        response = send(api, "PATCH", path, query=query, body=obj, content_type=APPLY_CONTENT_TYPE)
        if response.ok:
            result: dict[str, Any] = response.json()
            return result
        wait = _retry_after(response.status, response.header("Retry-After"))
        if wait is None or attempt == MAX_THROTTLE_RETRIES:
            raise response.error()
        time.sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises


@dataclass(frozen=True)
class Response:
    """An API server's answer, read whole, the same whatever the client's major version."""

    status: int
    reason: str
    headers: Mapping[str, str]
    data: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)

    def json(self) -> Any:
        return json.loads(self.data or b"{}")

    def error(self) -> ApiException:
        """The ``ApiException`` the generated API methods raise for this answer: ``status``,
        ``reason``, ``headers`` and ``body`` as text (kubernetes 37 decodes it; 36 left bytes)."""
        exc = ApiException(status=self.status, reason=self.reason)
        exc.body = self.data.decode("utf-8", errors="replace")
        exc.headers = dict(self.headers)
        return exc


def send(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, str]] = (),
    body: Any = None,
    content_type: str = "application/json",
) -> Response:
    """One request to ``path`` on the client's server, authenticated as the client is; any HTTP
    status comes back as a :class:`Response` (only a transport failure raises).

    Built from pieces both kubernetes 36.x and 37.x have (dagster-k8s 0.29.27, which pairs with
    our Dagster, requires ``kubernetes<37``): ``ApiClient.param_serialize`` exists only from 37,
    and ``ApiClient.call_api`` changed signature and meaning between them (36: path, method and
    all the generated options, returning deserialized data; 37: a prepared method and URL,
    returning the raw response). ``RESTClientObject.request(method, url, headers=, body=)`` is
    common to both; 36 raises ``ApiException`` on a non-2xx answer where 37 returns it, so both
    outcomes are folded into one ``Response``.
    """
    url = api.configuration.host + path
    headers: dict[str, str] = {"Accept": "application/json", "Content-Type": content_type}
    headers.update(api.default_headers)  # User-Agent, and any header the caller set on the client
    if api.cookie:
        headers["Cookie"] = api.cookie
    query = list(query)
    # The configuration's auth settings, as the generated methods apply them (``BearerToken``:
    # a static token, or one an exec/OIDC kubeconfig refreshes through ``refresh_api_key_hook``).
    # Client certificates live in the connection pool, not here.
    for setting in api.configuration.auth_settings().values():
        if setting.get("value") is None:
            continue
        if setting["in"] == "header":
            headers[setting["key"]] = setting["value"]
        elif setting["in"] == "query":
            query.append((setting["key"], setting["value"]))
    if query:
        url += "?" + urlencode(query)
    payload = api.sanitize_for_serialization(body) if body is not None else None
    try:
        raw = api.rest_client.request(method, url, headers=headers, body=payload)
    except ApiException as exc:
        if not exc.status:  # status 0: TLS or request-building failure, no answer to fold
            raise
        data = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
        return Response(int(exc.status), str(exc.reason or ""), dict(exc.headers or {}), data)
    data = raw.read() if hasattr(raw, "read") else raw.data  # 37 reads the body on demand; 36 preloads it
    return Response(int(raw.status), str(raw.reason or ""), dict(raw.getheaders() or {}), bytes(data or b""))


def _retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending an apply again, or None when the answer is final.

    client-go's rule: the server asks for a retry with 429 Too Many Requests (API Priority and
    Fairness throttling) or a 5xx carrying ``Retry-After``; any other error is final. An apply
    is idempotent, so sending it again is safe. The wait is capped: a server asking for minutes
    is better reported than waited out inside a publish.
    """
    if status != 429 and not (500 <= status <= 599 and header is not None):
        return None
    try:
        seconds = float(header) if header is not None else 1.0
    except ValueError:  # an HTTP date: not worth parsing for a capped wait
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
