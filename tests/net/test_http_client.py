"""One HTTP stack for every call: the model's and judges' calls, the batch API's control requests
and the model lists all go through ``runtime/net/client.py``'s client, so they pick a proxy as httpx
does (``ALL_PROXY`` included, ``NO_PROXY`` honoured). Two real servers on 127.0.0.1: the endpoint
itself and a proxy; each case says which of them the request reached.
"""

from __future__ import annotations

import asyncio

import pytest

from conftest import endpoint_spec
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.batch.base import Control
from wildtrace.runtime.checks.catalog import list_models
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.net.retry import RetryPolicy

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
              "NO_PROXY")


def respond(call: Call) -> Reply:
    if call.method == "GET":
        return Reply(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
    return chat("The pump failed.")


async def _model_call(base_url: str) -> bool:
    provider = make_provider(endpoint_spec("openai", route="m", base_url=base_url + "/v1", timeout_s=10.0))
    endpoint = Endpoint(provider, "sk-proxy-test", RetryPolicy(max_retries=0))
    try:
        result = await endpoint.call(provider.build_request("What failed?", Sampling(0.0, 16)))
    finally:
        await endpoint.aclose()
    return result.ok


async def _model_list(base_url: str) -> bool:
    listing = await list_models(endpoint_spec("openai", route="m", base_url=base_url + "/v1"), "sk-proxy-test")
    return listing.ids == ["m"]


async def _batch_control(base_url: str) -> bool:
    control = Control(base_url + "/v1", {"authorization": "Bearer sk-proxy-test"}, {}, RetryPolicy(max_retries=0),
                      10.0)
    try:
        answer = await control.json("GET", base_url + "/v1/batches/b1")
    finally:
        await control.aclose()
    return isinstance(answer, dict)


CALLS = {"model": _model_call, "model list": _model_list, "batch control": _batch_control}


@pytest.mark.parametrize("kind", list(CALLS))
@pytest.mark.parametrize(
    "env, via_proxy",
    [
        pytest.param({}, False, id="no-proxy-set"),
        pytest.param({"ALL_PROXY": "{proxy}"}, True, id="ALL_PROXY"),
        pytest.param({"all_proxy": "{proxy}"}, True, id="all_proxy"),
        pytest.param({"HTTP_PROXY": "{proxy}"}, True, id="HTTP_PROXY"),
        pytest.param({"HTTPS_PROXY": "{proxy}"}, False, id="HTTPS_PROXY-not-for-http"),
        pytest.param({"ALL_PROXY": "{proxy}", "NO_PROXY": "127.0.0.1"}, False, id="NO_PROXY-wins"),
    ],
)
def test_every_call_picks_its_proxy_as_httpx_does(monkeypatch, kind, env, via_proxy):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    with LoopbackServer(respond) as target, LoopbackServer(respond) as proxy:
        for name, value in env.items():
            monkeypatch.setenv(name, value.format(proxy=proxy.url))
        assert asyncio.run(CALLS[kind](target.url))
    reached, idle = (proxy, target) if via_proxy else (target, proxy)
    assert len(reached.calls) == 1 and idle.calls == []
    if via_proxy:  # a plain-HTTP request through a proxy names the whole URL
        assert reached.calls[0].path.startswith(target.url + "/v1/")
