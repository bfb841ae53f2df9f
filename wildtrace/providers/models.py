"""An endpoint's model list as its API spells it, pure: the GET for a page, and what a page says.

Each provider class says where its list is and how it is paged (in ``providers/<name>/wire.py``:
``model_list`` the path and query of a page, ``model_page`` a page's entries and the next page's
token, ``model_id`` the route an entry names, ``bare_route`` a route as the list spells it):

- OpenAI-compatible: ``GET {base_url}/models`` (bearer token), one page; OpenAI's entries may carry
  ``shutdown_date`` (YYYY-MM-DD), kept here (a past one is a retired route);
- Anthropic: ``GET {base_url}/v1/models?limit=1000`` with ``x-api-key`` and ``anthropic-version``,
  paged by ``after_id=<last_id>`` while ``has_more``;
- Gemini: ``GET {base_url}/v1beta/models?pageSize=1000`` with ``x-goog-api-key``, paged by
  ``pageToken=<nextPageToken>``; names are ``models/<id>``.

This module builds the request (``page_request``) and reads a page's bytes (``read_page``);
``runtime/checks/catalog.py`` makes the GETs and bounds what they cost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wildtrace.providers.base import EndpointSpec, Provider
from wildtrace.providers.registry import make_provider, provider_class

#: An id longer than this is cut (a list is text from outside).
MAX_ID_CHARS = 300


class NotAModelList(ValueError):
    """A page that is not a model list; the message says why ("the body is not JSON", …)."""


@dataclass(frozen=True)
class PageRequest:
    """The GET for one page of a model list: its URL, query and headers (the key's among them)."""

    url: str
    query: Mapping[str, str]
    headers: Mapping[str, str]


@dataclass(frozen=True)
class ModelPage:
    """One page of a model list: the routes it names, in order, each one's shutdown date if it
    has one, and the next page's token (None: the last page)."""

    ids: tuple[str, ...]
    shutdown: Mapping[str, str] = field(default_factory=dict)
    token: str | None = None


def page_request(spec: EndpointSpec, key: str | None, token: str | None = None) -> PageRequest:
    """The GET for the page at ``token`` (None: the first): JSON asked for, the API's own headers
    (Anthropic's version, as every Messages call sends) and the key when there is one."""
    cls = provider_class(spec.provider)
    path, query = cls.model_list(token)
    headers = {"accept": "application/json", **cls.api_headers}
    if key:
        headers.update(make_provider(spec).auth_headers(key))
    return PageRequest(url=spec.base_url.rstrip("/") + path, query=query, headers=headers)


def read_page(provider: str, data: bytes) -> ModelPage:
    """What one page's bytes say, in the provider's shape; raises NotAModelList for a body that is
    not JSON or not a list of models. Entries that name no route are skipped."""
    try:
        page = json.loads(data)
    except (ValueError, RecursionError):
        raise NotAModelList("the body is not JSON") from None
    cls = provider_class(provider)
    models, token = cls.model_page(page) if isinstance(page, dict) else (None, None)
    if not isinstance(models, list):
        raise NotAModelList("the body is not a model list")
    ids: list[str] = []
    shutdown: dict[str, str] = {}
    for entry in models:
        ident = _model_id(cls, entry)
        if ident is None:
            continue
        ids.append(ident)
        if isinstance(entry.get("shutdown_date"), str):
            shutdown[ident] = entry["shutdown_date"][:10]
    return ModelPage(ids=tuple(ids), shutdown=shutdown, token=token if isinstance(token, str) and token else None)


def _model_id(cls: type[Provider], entry: Any) -> str | None:
    """The route an entry names, as the list spells it, or None for an entry that names none."""
    ident = cls.model_id(entry) if isinstance(entry, dict) else None
    if not isinstance(ident, str) or not ident:
        return None
    return cls.bare_route(ident)[:MAX_ID_CHARS]
