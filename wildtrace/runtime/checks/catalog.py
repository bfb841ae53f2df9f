"""The endpoint's own model list, asked before any paid call: is the route there, retired, or named otherwise?

``python -m wildtrace.check`` asks each endpoint's list where its API offers one. What the GET is
and what a page says is the provider's (``providers/models.py``, from the provider class's
``model_list``, ``model_page`` and ``model_id``); this module makes the GETs, page after page.

A list that cannot be had (a gateway without ``/models`` answers 404, a timeout, a body that
is not a list) is "no model list", never a failure. Everything read is bounded: each page's
bytes, the number of pages, the ids kept, and the time.
"""

from __future__ import annotations

import asyncio
import datetime
import difflib
import re
from dataclasses import dataclass, field
from enum import StrEnum

import httpx

from wildtrace.providers.base import EndpointSpec
from wildtrace.providers.models import ModelPage, NotAModelList, PageRequest, page_request, read_page
from wildtrace.providers.registry import provider_class
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


async def _get(client: httpx.AsyncClient, request: PageRequest) -> bytes:
    """One page's bytes, at most MAX_PAGE_BYTES; a non-2xx has no list."""
    async with client.stream("GET", request.url, params=dict(request.query), headers=dict(request.headers)) as response:
        if not 200 <= response.status_code < 300:
            raise _NoList(f"HTTP {response.status_code}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_PAGE_BYTES:
                raise _NoList(f"a page larger than {MAX_PAGE_BYTES >> 20} MiB")
    return bytes(body)


async def list_models(spec: EndpointSpec, key: str | None, transport: httpx.AsyncBaseTransport | None = None,
                      max_pages: int = MAX_PAGES) -> Listing:
    """The endpoint's model list, every page up to ``max_pages``; never raises for what the server does."""
    client = make_client(TIMEOUT_S, transport=transport)
    listing = Listing(ids=[])
    token: str | None = None
    try:
        async with client, asyncio.timeout(TIMEOUT_S * 2):
            while True:
                page = read_page(spec.provider, await _get(client, page_request(spec, key, token)))
                listing.pages += 1
                _keep(listing, page)
                token = page.token
                if token is None or listing.pages >= max_pages:
                    break
    except (_NoList, NotAModelList) as exc:
        return Listing(ids=None, why=str(exc))
    except TimeoutError:
        return Listing(ids=None, why="timeout")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return Listing(ids=None, why=redact(f"{type(exc).__name__}: {exc}")[:200])
    return listing


def _keep(listing: Listing, page: ModelPage) -> None:
    """A page's ids (and their shutdown dates) added to the listing, up to MAX_IDS."""
    assert listing.ids is not None
    for ident in page.ids[:max(0, MAX_IDS - len(listing.ids))]:
        listing.ids.append(ident)
        if ident in page.shutdown:
            listing.shutdown[ident] = page.shutdown[ident]


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
