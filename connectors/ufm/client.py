"""httpx client for the NVIDIA UFM REST API: systems, ports and links of the InfiniBand fabric.

UFM facts this client encodes (UFM Enterprise REST API guide):

* two URL roots: ``/ufmRest`` with HTTP basic auth, and ``/ufmRestV3`` with an access token sent
  as ``Authorization: Basic <token>`` (UFM's own spelling: the word is Basic, the value a token);
* ``GET .../resources/{systems,ports,links}`` answer a JSON list, or, with ``page_number`` and
  ``rpp`` (rows per page), one page wrapped in an object with the rows under ``data``;
* an unknown resource is ``200 {}``, not 404, so an empty object is treated as "not found".

TLS: UFM serves HTTPS, and its certificate is verified unless the site file says
``verify_tls: false``: against ``ca_file`` when given, else against the operating system's trust
store (``ssl.create_default_context``, which also honours ``SSL_CERT_FILE``/``SSL_CERT_DIR``),
not certifi's bundle, because a site's UFM certificate comes from the site's own CA. An
``http://`` URL is refused (:class:`UfmTlsError`) unless ``allow_plain_http`` says so: both of
UFM's roots send a credential on every request, and over plain HTTP anyone on the path reads it.
A failed
check is :class:`UfmTlsError`, naming why (expired, unknown issuer, host name mismatch); it is
not retried, since only a configuration change fixes it. :attr:`UfmClient.tls_trust` says what
the client trusts.

Every request has a timeout; 5xx answers, timeouts, dropped connections and unreadable JSON (a
proxy that cut the body) are retried with exponential backoff; 401/403 are not (retrying a bad
password only locks the account). Secrets never appear in errors. :func:`decode_body` and
:func:`rows_of` turn an answer's bytes into rows, or into a :class:`UfmBadResponse` saying why
not.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

RESOURCES = ("systems", "ports", "links")
PAGE_KEYS = ("data", "rows", "items")  # where a paged answer keeps its rows (UFM uses data)
PAGE_COUNT_KEYS = ("pages_number", "total_pages", "pages")
TOTAL_ROWS_KEYS = ("total_rows", "total")
MAX_PAGES = 100_000  # a twin or proxy that always says "more" must not loop forever


class UfmError(Exception):
    """Collection failed; ``status`` says how (maps to ops.collection_status)."""

    status = "error"


class UfmAuthError(UfmError):
    status = "auth_failure"


class UfmTimeout(UfmError):
    status = "timeout"


class UfmUnreachable(UfmError):
    status = "unreachable"


class UfmNotFound(UfmError):
    status = "no_data"


class UfmBadResponse(UfmError):
    status = "invalid"


class UfmTlsError(UfmError):
    """UFM's certificate failed verification, the TLS handshake failed, or ``ca_file`` is unusable.

    Reported as an authentication failure: the server could not prove it is the configured UFM.
    """

    status = "auth_failure"


@dataclass(frozen=True)
class UfmConfig:
    base_url: str
    auth: Literal["basic", "token"]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    verify_tls: bool = True
    ca_file: str | None = None
    allow_plain_http: bool = False  # a lab's UFM only: credentials then cross the network in clear
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    rpp: int | None = None  # rows per page; None = ask for the whole list at once


@dataclass
class UfmFabric:
    # The rows as UFM sent them: anything JSON can hold; to_fabric keeps or quarantines each one.
    systems: list[Any]
    ports: list[Any]
    links: list[Any]
    requests: int = 0
    retries: int = 0


class UfmClient:
    def __init__(
        self,
        config: UfmConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._sleep = sleep
        self.requests = 0
        self.retried = 0
        if urlsplit(config.base_url).scheme.lower() == "http" and not config.allow_plain_http:
            raise UfmTlsError(
                f"refusing to send the {config.auth} credentials to {config.base_url} over plain http: use "
                "https:// (UFM serves it), or allow_plain_http: true for a lab UFM"
            )
        headers = {"Accept": "application/json"}
        auth: httpx.Auth | None = None
        if config.auth == "basic":
            if config.username is None or config.password is None:
                raise UfmAuthError("auth basic needs a username and a password")
            auth = httpx.BasicAuth(config.username, config.password)
            self.prefix = "/ufmRest"
        else:
            if not config.token:
                raise UfmAuthError("auth token needs a token")
            headers["Authorization"] = f"Basic {config.token}"
            self.prefix = "/ufmRestV3"
        self._http = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            auth=auth,
            headers=headers,
            verify=tls_context(config),
            timeout=httpx.Timeout(config.timeout_s),
            transport=transport,
            follow_redirects=False,
        )

    @property
    def tls_trust(self) -> str:
        """What this client trusts for UFM's certificate, in words (also in its TLS errors)."""
        return tls_trust(self.config)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> UfmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request with retries --

    def _get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        attempts = self.config.retries + 1
        last: UfmError | None = None
        for attempt in range(attempts):
            if attempt:
                self.retried += 1
                self._sleep(self.config.backoff_s * 2 ** (attempt - 1))
            self.requests += 1
            try:
                resp = self._http.get(path, params=params)
            except httpx.TimeoutException:
                last = UfmTimeout(f"GET {path}: no answer within {self.config.timeout_s:g}s")
                continue
            except httpx.TransportError as exc:
                tls = _tls_failure(exc)
                if tls is not None:
                    raise UfmTlsError(f"GET {path}: {tls} ({self.tls_trust})") from None
                last = UfmUnreachable(f"GET {path}: {type(exc).__name__}: {exc}")
                continue
            if resp.status_code in (401, 403):
                raise UfmAuthError(f"GET {path}: HTTP {resp.status_code} (check the {self.config.auth} credentials)")
            if resp.status_code >= 500:
                last = UfmError(f"GET {path}: HTTP {resp.status_code}")
                continue
            if resp.status_code == 404:
                raise UfmNotFound(f"GET {path}: HTTP 404")
            if resp.status_code != 200:
                raise UfmBadResponse(f"GET {path}: HTTP {resp.status_code}")
            try:
                return decode_body(resp.content, f"GET {path}")
            except UfmBadResponse as exc:
                last = exc  # a proxy that cut the body: worth another try
                continue
        assert last is not None
        raise type(last)(f"{last} (after {attempts} attempt(s))")

    def rows(self, resource: str) -> list[Any]:
        """All rows of ``systems``/``ports``/``links``, following pages when ``rpp`` is set."""
        path = f"{self.prefix}/resources/{resource}"
        if self.config.rpp is None:
            return rows_of(self._get_json(path), f"GET {path}")
        out: list[Any] = []
        previous: list[Any] | None = None
        for page in range(1, MAX_PAGES + 1):
            body = self._get_json(path, {"page_number": page, "rpp": self.config.rpp})
            rows = rows_of(body, f"GET {path}")
            if rows and rows == previous:
                # A server (or proxy) that ignores page_number would otherwise be read MAX_PAGES times.
                raise UfmBadResponse(f"GET {path}: page {page} repeats page {page - 1} (page_number ignored?)")
            previous = rows
            out.extend(rows)
            if isinstance(body, list):
                return out  # a UFM that ignores paging answered the whole list
            pages = next((body[k] for k in PAGE_COUNT_KEYS if isinstance(body.get(k), int)), None)
            total = next((body[k] for k in TOTAL_ROWS_KEYS if isinstance(body.get(k), int)), None)
            if pages is not None and page >= pages:
                return out
            if total is not None and len(out) >= total:
                return out
            if pages is None and total is None and len(rows) < self.config.rpp:
                return out
            if not rows:
                return out
        raise UfmBadResponse(f"GET {path}: more than {MAX_PAGES} pages")

    def fetch(self) -> UfmFabric:
        fabric = UfmFabric(systems=self.rows("systems"), ports=self.rows("ports"), links=self.rows("links"))
        fabric.requests, fabric.retries = self.requests, self.retried
        return fabric


def tls_trust(config: UfmConfig) -> str:
    """What ``config`` trusts for UFM's certificate, in words."""
    if not config.verify_tls:
        return "verify_tls is false: the certificate is not checked"
    if config.ca_file:
        return f"trusting ca_file {config.ca_file}"
    return "trusting the system trust store (no ca_file)"


def tls_context(config: UfmConfig) -> ssl.SSLContext:
    """The client's TLS context for ``config``; an unusable ``ca_file`` is a :class:`UfmTlsError`."""
    if not config.verify_tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    try:
        # cafile=None: the system trust store (httpx's own default would be certifi's bundle).
        return ssl.create_default_context(cafile=config.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise UfmTlsError(f"ca_file {config.ca_file}: cannot load CA certificates ({exc})") from None


def _tls_failure(exc: BaseException) -> str | None:
    """Why TLS failed, if ``exc`` (an httpx error) was caused by a TLS failure; else None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate verification failed: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed: {cause.reason or cause}"
        cause = cause.__cause__ or cause.__context__
    return None


def decode_body(content: bytes, where: str) -> Any:
    """An answer's bytes as JSON. Not UTF-8, not JSON (a cut body) or nested beyond what can be
    read is :class:`UfmBadResponse`; UFM's ``{}`` for an unknown resource is :class:`UfmNotFound`."""
    try:
        body = json.loads(content)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long to read
        raise UfmBadResponse(f"{where}: body is not valid JSON ({exc}); {len(content)} bytes") from None
    except RecursionError:
        raise UfmBadResponse(f"{where}: body is nested too deeply to read; {len(content)} bytes") from None
    if body == {}:
        # UFM answers an unknown resource with 200 and an empty object.
        raise UfmNotFound(f"{where}: UFM answered 200 {{}} (resource not found)")
    return body


def rows_of(body: Any, where: str) -> list[Any]:
    """The rows of a decoded answer: a JSON list, or a page object with the list under one of
    :data:`PAGE_KEYS`. Anything else is :class:`UfmBadResponse`. Rows are not checked here:
    :func:`connectors.ufm.to_fabric` keeps or quarantines each one."""
    if isinstance(body, list):
        return body
    if isinstance(body, dict):
        key = next((k for k in PAGE_KEYS if k in body), None)
        if key is None or not isinstance(body[key], list):
            keys = ", ".join(repr(k)[:40] for k in list(body)[:5])
            raise UfmBadResponse(f"{where}: an object without a row list (keys: {keys})")
        rows: list[Any] = body[key]
        return rows
    raise UfmBadResponse(f"{where}: expected a JSON list or object, got {type(body).__name__}")
