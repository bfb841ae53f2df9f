"""The endpoint's own model list, asked before any paid call: is the route there, retired, or named otherwise?

``python -m wildtrace.check`` asks each endpoint's list where its API offers one (the provider
class, in ``providers/<name>/wire.py``, says where and how it is paged: ``Provider.model_list``,
``model_page``, ``model_id``); this module makes the GETs:

- OpenAI-compatible: ``GET {base_url}/models`` (bearer token); OpenAI's entries may carry
  ``shutdown_date`` (YYYY-MM-DD), which is reported, and a past one is a retired route;
- Anthropic: ``GET {base_url}/v1/models?limit=1000`` with ``x-api-key`` and
  ``anthropic-version``, paged by ``after_id=<last_id>`` while ``has_more``;
- Gemini: ``GET {base_url}/v1beta/models?pageSize=1000`` with ``x-goog-api-key``, paged by
  ``pageToken=<nextPageToken>``; names are ``models/<id>``.

A list that cannot be had (a gateway without ``/models`` answers 404, a timeout, a body that
is not a list) is "no model list", never a failure. Everything read is bounded: each page's
bytes, the number of pages, the ids kept, and the time.
"""

from __future__ import annotations

import asyncio
import datetime
import difflib
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from wildtrace.providers.base import EndpointSpec
from wildtrace.providers.registry import make_provider, provider_class
from wildtrace.runtime.net.client import make_client
from wildtrace.runtime.net.secrets import redact
from wildtrace.runtime.net.served import default_pattern

#: Bounds on what a model list may cost to read.
MAX_PAGE_BYTES = 8 << 20
MAX_PAGES = 50
MAX_IDS = 100_000
TIMEOUT_S = 30.0
#: Ark's endpoint ids (``ep-…``) name a deployment, not a model: no list holds them.
_ENDPOINT_ID = re.compile(r"^ep-[0-9a-z-]+$", re.IGNORECASE)


class ListingStatus(StrEnum):
    """What a model list says of a route: there, there under another name, missing, retired, or no list to ask."""

    LISTED = "listed"
    ALIAS = "listed as"
    MISSING = "missing"
    RETIRED = "retired"
    NO_LIST = "no model list"
    NOT_ASKED = "-"


@dataclass
class Listing:
    """An endpoint's model list: the ids (None when there is none) and each id's shutdown date if given."""

    ids: list[str] | None
    shutdown: dict[str, str] = field(default_factory=dict)
    why: str = ""  #: why there is no list ("HTTP 404", "timeout", …)
    pages: int = 0


@dataclass(frozen=True)
class RouteStatus:
    """What the list says of one route: a status, the text shown, and whether it blocks the paid call."""

    status: ListingStatus
    text: str
    blocks: bool = False


class _NoList(Exception):
    """The list cannot be had; the message says why."""


def _page_url(spec: EndpointSpec, token: str | None) -> str:
    path, query = provider_class(spec.provider).model_list(token)
    return spec.base_url.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")


def _headers(spec: EndpointSpec, key: str | None) -> dict[str, str]:
    """Accept JSON, the API's own headers (Anthropic's version, as every Messages call sends) and the key."""
    headers = {"accept": "application/json", **provider_class(spec.provider).api_headers}
    if key:
        headers.update(make_provider(spec).auth_headers(key))
    return headers


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    """One page as JSON, at most MAX_PAGE_BYTES; a non-2xx or unreadable body has no list."""
    async with client.stream("GET", url, headers=headers) as response:
        if not 200 <= response.status_code < 300:
            raise _NoList(f"HTTP {response.status_code}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_PAGE_BYTES:
                raise _NoList(f"a page larger than {MAX_PAGE_BYTES >> 20} MiB")
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise _NoList("the body is not JSON") from None


def _entries(spec: EndpointSpec, page: Any) -> tuple[list[dict], str | None]:
    """(model entries, the next page's token) of one page, in the API's own shape."""
    if not isinstance(page, dict):
        raise _NoList("the body is not a model list")
    models, token = provider_class(spec.provider).model_page(page)
    if not isinstance(models, list):
        raise _NoList("the body is not a model list")
    return [m for m in models if isinstance(m, dict)], token if isinstance(token, str) and token else None


def _model_id(spec: EndpointSpec, entry: dict) -> str | None:
    provider = provider_class(spec.provider)
    ident = provider.model_id(entry)
    if not isinstance(ident, str) or not ident:
        return None
    return provider.bare_route(ident)[:300]


async def list_models(spec: EndpointSpec, key: str | None, transport: httpx.AsyncBaseTransport | None = None,
                      max_pages: int = MAX_PAGES) -> Listing:
    """The endpoint's model list, every page up to ``max_pages``; never raises for what the server does."""
    client = make_client(TIMEOUT_S, transport=transport)
    listing = Listing(ids=[])
    token: str | None = None
    try:
        async with client, asyncio.timeout(TIMEOUT_S * 2):
            while True:
                entries, token = _entries(spec, await _get(client, _page_url(spec, token), _headers(spec, key)))
                listing.pages += 1
                for entry in entries:
                    ident = _model_id(spec, entry)
                    if ident is not None and len(listing.ids or []) < MAX_IDS:
                        assert listing.ids is not None
                        listing.ids.append(ident)
                        if isinstance(entry.get("shutdown_date"), str):
                            listing.shutdown[ident] = entry["shutdown_date"][:10]
                if token is None or listing.pages >= max_pages:
                    break
    except _NoList as exc:
        return Listing(ids=None, why=str(exc))
    except TimeoutError:
        return Listing(ids=None, why="timeout")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return Listing(ids=None, why=redact(f"{type(exc).__name__}: {exc}")[:200])
    return listing


def route_status(spec: EndpointSpec, listing: Listing | None, today: datetime.date | None = None) -> RouteStatus:
    """What the list says of the spec's route; MISSING and RETIRED block the paid preflight call."""
    if provider_class(spec.provider).local or listing is None:
        return RouteStatus(ListingStatus.NOT_ASKED, "-")
    if listing.ids is None:
        return RouteStatus(ListingStatus.NO_LIST, f"no model list ({listing.why})")
    route = provider_class(spec.provider).bare_route(spec.route)
    by_lower = {i.lower(): i for i in listing.ids}
    found = by_lower.get(route.lower())
    if found is None:
        pattern = re.compile(default_pattern(route), re.IGNORECASE)
        aliases = sorted(i for i in listing.ids if pattern.fullmatch(i))
        if aliases:
            return RouteStatus(ListingStatus.ALIAS, f"listed as {', '.join(aliases[:3])}")
        if _ENDPOINT_ID.match(route):
            return RouteStatus(ListingStatus.NO_LIST, f"not listed (an endpoint id; {len(listing.ids)} models listed)")
        near = difflib.get_close_matches(route, listing.ids, n=3, cutoff=0.5)
        hint = f"; nearest: {', '.join(near)}" if near else ""
        return RouteStatus(ListingStatus.MISSING,
                           f"MISSING: not among the {len(listing.ids)} models the endpoint lists{hint}", blocks=True)
    shutdown = listing.shutdown.get(found)
    if shutdown:
        try:
            gone = datetime.date.fromisoformat(shutdown) <= (today or datetime.date.today())
        except ValueError:
            gone = False
        if gone:
            return RouteStatus(ListingStatus.RETIRED, f"RETIRED: listed with shutdown_date {shutdown}", blocks=True)
        return RouteStatus(ListingStatus.LISTED, f"listed (shutdown_date {shutdown})")
    return RouteStatus(ListingStatus.LISTED, "listed" if found == route else f"listed as {found}")
