"""httpx client for the NVIDIA UFM REST API: systems, ports and links of the InfiniBand fabric.

UFM facts this client encodes (UFM Enterprise REST API guide):

* two URL roots: ``/ufmRest`` with HTTP basic auth, and ``/ufmRestV3`` with an access token sent
  as ``Authorization: Basic <token>`` (UFM's own spelling: the word is Basic, the value a token);
* ``GET .../resources/{systems,ports,links}`` answer a JSON list, or, with ``page_number`` and
  ``rpp`` (rows per page), one page wrapped in an object with the rows under ``data``;
* an unknown resource is ``200 {}``, not 404, so an empty object is treated as "not found".

TLS verification is on unless the site file says otherwise (``verify_tls``/``ca_file``). Every
request has a timeout; 5xx answers, timeouts, dropped connections and unreadable JSON (a proxy
that cut the body) are retried with exponential backoff; 401/403 are not (retrying a bad
password only locks the account). Secrets never appear in errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

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


@dataclass(frozen=True)
class UfmConfig:
    base_url: str
    auth: Literal["basic", "token"]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    verify_tls: bool = True
    ca_file: str | None = None
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    rpp: int | None = None  # rows per page; None = ask for the whole list at once


@dataclass
class UfmFabric:
    systems: list[dict[str, Any]]
    ports: list[dict[str, Any]]
    links: list[dict[str, Any]]
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
        verify: bool | str = config.ca_file if (config.verify_tls and config.ca_file) else config.verify_tls
        self._http = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            auth=auth,
            headers=headers,
            verify=verify,
            timeout=httpx.Timeout(config.timeout_s),
            transport=transport,
            follow_redirects=False,
        )

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
                body = resp.json()
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                last = UfmBadResponse(f"GET {path}: body is not valid JSON ({exc}); {len(resp.content)} bytes")
                continue
            if body == {}:
                # UFM answers an unknown resource with 200 and an empty object.
                raise UfmNotFound(f"GET {path}: UFM answered 200 {{}} (resource not found)")
            return body
        assert last is not None
        raise type(last)(f"{last} (after {attempts} attempt(s))")

    def rows(self, resource: str) -> list[dict[str, Any]]:
        """All rows of ``systems``/``ports``/``links``, following pages when ``rpp`` is set."""
        path = f"{self.prefix}/resources/{resource}"
        if self.config.rpp is None:
            return _rows_of(self._get_json(path), path)
        out: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            body = self._get_json(path, {"page_number": page, "rpp": self.config.rpp})
            rows = _rows_of(body, path)
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


def _rows_of(body: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(body, list):
        rows = body
    elif isinstance(body, dict):
        key = next((k for k in PAGE_KEYS if k in body), None)
        if key is None or not isinstance(body[key], list):
            raise UfmBadResponse(f"GET {path}: an object without a row list ({', '.join(list(body)[:5])})")
        rows = body[key]
    else:
        raise UfmBadResponse(f"GET {path}: expected a JSON list, got {type(body).__name__}")
    return rows
