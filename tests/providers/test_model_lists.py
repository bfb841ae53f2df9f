"""Model lists: each provider's GET and pages (providers/models.py, pure), and the paging loop
(runtime/checks/catalog.py) over ``httpx.MockTransport``: the wire is not the point here, the pages
are. ``tests/net/test_http_client.py`` reads a list through a real proxy on the loopback.
"""

from __future__ import annotations

import asyncio
import urllib.parse

import httpx
import pytest

from conftest import endpoint_spec
from wildtrace.providers.models import ModelPage, NotAModelList, page_request, read_page
from wildtrace.providers.registry import PROVIDERS
from wildtrace.runtime.checks.catalog import ListingStatus, list_models, route_status
from wildtrace.runtime.net.secrets import register


@pytest.mark.parametrize(
    ("name", "token", "url_part"),
    [("openai", None, ("/models", {})), ("anthropic", None, ("/v1/models", {"limit": "1000"})),
     ("anthropic", "m-9", ("/v1/models", {"limit": "1000", "after_id": "m-9"})),
     ("gemini", None, ("/v1beta/models", {"pageSize": "1000"})),
     ("gemini", "t2", ("/v1beta/models", {"pageSize": "1000", "pageToken": "t2"}))],
)
def test_model_list_wire_format(name, token, url_part):
    assert PROVIDERS[name].model_list(token) == url_part


@pytest.mark.parametrize(("provider", "base_url", "key", "token", "url", "headers"), [
    ("openai", "https://gw.example.test/v1/", "sk-1", None, "https://gw.example.test/v1/models",
     {"accept": "application/json", "Authorization": "Bearer sk-1"}),
    ("openai", "https://gw.example.test/v1", None, None, "https://gw.example.test/v1/models",
     {"accept": "application/json"}),  # no key: asked without one
    ("anthropic", "https://api.anthropic.test", "sk-ant", "claude-x",
     "https://api.anthropic.test/v1/models?limit=1000&after_id=claude-x",
     {"accept": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "sk-ant"}),
    ("gemini", "https://gl.example.test", "gm", "p/2=", "https://gl.example.test/v1beta/models?pageSize=1000&pageToken=p%2F2%3D",
     {"accept": "application/json", "x-goog-api-key": "gm"}),  # the key in a header, never in the URL
])
def test_page_request(provider, base_url, key, token, url, headers):
    request = page_request(endpoint_spec(provider, base_url=base_url), key, token)
    assert dict(request.headers) == headers
    assert str(httpx.Request("GET", request.url, params=dict(request.query)).url) == url


@pytest.mark.parametrize(("provider", "body", "page"), [
    ("openai", b'{"object":"list","data":[{"id":"gpt-4.1","shutdown_date":"2027-01-14T00:00:00Z"},{"id":"gpt-5"}]}',
     ModelPage(ids=("gpt-4.1", "gpt-5"), shutdown={"gpt-4.1": "2027-01-14"})),
    ("openai", b'{"data":[{"id":""},{"id":7},"gpt-x",{"name":"no-id"},{"id":"kept"}]}', ModelPage(ids=("kept",))),
    ("anthropic", b'{"data":[{"id":"claude-a"},{"id":"claude-b"}],"has_more":true,"last_id":"claude-b"}',
     ModelPage(ids=("claude-a", "claude-b"), token="claude-b")),
    ("anthropic", b'{"data":[{"id":"claude-a"}],"has_more":false,"last_id":"claude-a"}', ModelPage(ids=("claude-a",))),
    ("gemini", b'{"models":[{"name":"models/gemini-3-flash"},{"name":"tunedModels/t"}],"nextPageToken":"p2"}',
     ModelPage(ids=("gemini-3-flash", "tunedModels/t"), token="p2")),
    ("gemini", b"{}", ModelPage(ids=())),  # models.list's empty page
    ("gemini", b'{"models":[],"nextPageToken":""}', ModelPage(ids=())),  # an empty token ends the list
])
def test_read_page(provider, body, page):
    assert read_page(provider, body) == page


def test_an_id_from_outside_is_bounded():
    assert read_page("openai", b'{"data":[{"id":"' + b"m" * 1000 + b'"}]}').ids == ("m" * 300,)


@pytest.mark.parametrize(("provider", "body", "why"), [
    ("openai", b"<html>hello</html>", "the body is not JSON"),
    ("openai", b"[" * 100_000, "the body is not JSON"),  # nested past the parser's depth
    ("openai", b'{"object":"list"}', "the body is not a model list"),
    ("openai", b'[{"id":"gpt-5"}]', "the body is not a model list"),
    ("anthropic", b'{"data":{"id":"x"}}', "the body is not a model list"),
    ("gemini", b'{"models":null,"nextPageToken":"p"}', "the body is not a model list"),
])
def test_a_page_that_is_not_a_model_list(provider, body, why):
    with pytest.raises(NotAModelList, match=why):
        read_page(provider, body)


# ---------------------------------------------------------------------- the paging loop


def listed(provider: str, handler, key: str | None = "k", **kwargs):
    """list_models for a spec of ``provider`` at a test host, the handler standing in for the server;
    the requests the handler saw."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    spec = endpoint_spec(provider, route=kwargs.pop("route", "route-x"), base_url="https://list.example.test")
    listing = asyncio.run(list_models(spec, key, transport=httpx.MockTransport(record), **kwargs))
    return spec, listing, seen


def query(request: httpx.Request) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(request.url.query.decode()))


def test_anthropic_model_list_is_read_page_by_page():
    pages = {None: (["claude-opus-4-8", "claude-opus-4-7"], True), "claude-opus-4-7": (["claude-opus-4-6"], True),
             "claude-opus-4-6": (["claude-sonnet-4-6", "claude-haiku-4-5-20251001"], False)}

    def handler(request: httpx.Request) -> httpx.Response:
        ids, more = pages[query(request).get("after_id")]
        return httpx.Response(200, json={"data": [{"type": "model", "id": i, "display_name": i} for i in ids],
                                         "has_more": more, "first_id": ids[0], "last_id": ids[-1]})

    spec, listing, seen = listed("anthropic", handler, key="sk-ant-test", route="claude-haiku-4-5")
    assert listing.pages == 3 and listing.ids == ["claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6",
                                                  "claude-sonnet-4-6", "claude-haiku-4-5-20251001"]
    assert [(r.method, r.url.path) for r in seen] == [("GET", "/v1/models")] * 3
    assert [query(r) for r in seen] == [{"limit": "1000"}, {"limit": "1000", "after_id": "claude-opus-4-7"},
                                        {"limit": "1000", "after_id": "claude-opus-4-6"}]
    assert all(r.headers["x-api-key"] == "sk-ant-test" and r.headers["anthropic-version"] == "2023-06-01"
               for r in seen)
    assert route_status(spec, listing).text == "listed as claude-haiku-4-5-20251001"  # served under its dated name


def test_gemini_model_list_is_read_by_page_token():
    def handler(request: httpx.Request) -> httpx.Response:
        if query(request).get("pageToken") == "p2":
            return httpx.Response(200, json={"models": [{"name": "models/gemini-3.5-flash-lite", "version": "001"}]})
        return httpx.Response(200, json={"models": [{"name": "models/gemini-3.8-flash"},
                                                    {"name": "models/gemini-3.1-pro-preview"}],
                                         "nextPageToken": "p2"})

    spec, listing, seen = listed("gemini", handler, key="gm-test", route="gemini-3.5-flash-lite")
    assert listing.ids == ["gemini-3.8-flash", "gemini-3.1-pro-preview", "gemini-3.5-flash-lite"]
    assert [query(r) for r in seen] == [{"pageSize": "1000"}, {"pageSize": "1000", "pageToken": "p2"}]
    assert all(r.url.path == "/v1beta/models" and r.headers["x-goog-api-key"] == "gm-test"
               and "key=" not in str(r.url) for r in seen)
    assert route_status(spec, listing).status == ListingStatus.LISTED
    gone = route_status(endpoint_spec("gemini", route="gemini-2.5-flash"), listing)
    assert gone.status == ListingStatus.MISSING and gone.blocks
    assert gone.text.endswith("nearest: gemini-3.8-flash, gemini-3.5-flash-lite")


def test_shutdown_dates_are_kept_across_pages():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": "gpt-4.1", "shutdown_date": "2026-11-30"}, {"id": "gpt-5"}]})

    spec, listing, _ = listed("openai", handler, route="gpt-4.1")
    assert listing.ids == ["gpt-4.1", "gpt-5"] and listing.shutdown == {"gpt-4.1": "2026-11-30"}
    assert route_status(spec, listing).status == ListingStatus.RETIRED


def test_a_list_that_never_ends_is_read_to_its_page_bound():
    def handler(request: httpx.Request) -> httpx.Response:
        n = len(str(request.url))
        return httpx.Response(200, json={"data": [{"id": f"m{n}"}], "has_more": True, "last_id": f"x{n}"})

    _, listing, seen = listed("anthropic", handler, max_pages=4)
    assert listing.pages == 4 and len(seen) == 4


def test_the_ids_kept_are_bounded(monkeypatch):
    monkeypatch.setattr("wildtrace.runtime.checks.catalog.MAX_IDS", 3)
    pages = {None: ["a", "b"], "b": ["c", "d"], "d": ["e"]}

    def handler(request: httpx.Request) -> httpx.Response:
        ids = pages[query(request).get("after_id")]
        return httpx.Response(200, json={"data": [{"id": i} for i in ids], "has_more": ids != ["e"],
                                         "last_id": ids[-1]})

    _, listing, seen = listed("anthropic", handler)
    assert listing.ids == ["a", "b", "c"] and listing.pages == 3 and len(seen) == 3


def _raise(exc: Exception):
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc
    return handler


@pytest.mark.parametrize(("handler", "why"), [
    (lambda r: httpx.Response(404, json={"error": "Not Found"}), "HTTP 404"),  # a gateway without /models
    (lambda r: httpx.Response(200, content=b"<html>hello</html>", headers={"content-type": "text/html"}),
     "the body is not JSON"),
    (lambda r: httpx.Response(200, json={"object": "list"}), "the body is not a model list"),
    (lambda r: httpx.Response(200, content=b"{" + b" " * (9 << 20) + b"}"), "a page larger than 8 MiB"),
    (lambda r: httpx.Response(302, headers={"location": "https://elsewhere.test/"}), "HTTP 302"),  # not followed
    (_raise(httpx.ConnectError("connection refused")), "ConnectError: connection refused"),
    (_raise(httpx.ReadTimeout("timed out")), "ReadTimeout: timed out"),
])
def test_an_endpoint_without_a_usable_list_has_no_model_list(handler, why):
    spec, listing, _ = listed("openai", handler)
    assert listing.ids is None and listing.why == why
    status = route_status(spec, listing)
    assert status.status == ListingStatus.NO_LIST and not status.blocks and status.text == f"no model list ({why})"


def test_a_page_after_a_good_one_that_fails_leaves_no_list():
    def handler(request: httpx.Request) -> httpx.Response:
        if "after_id" in query(request):
            return httpx.Response(500, json={"error": "boom"})
        return httpx.Response(200, json={"data": [{"id": "a"}], "has_more": True, "last_id": "a"})

    _, listing, seen = listed("anthropic", handler)
    assert (listing.ids, listing.why, len(seen)) == (None, "HTTP 500", 2)


def test_a_key_in_a_transport_error_is_redacted():
    register("sk-list-secret-000000000000")  # as reading the key's variable does
    _, listing, _ = listed("openai", _raise(httpx.ConnectError("refused for sk-list-secret-000000000000")),
                           key="sk-list-secret-000000000000")
    assert listing.ids is None and "sk-list-secret" not in listing.why
