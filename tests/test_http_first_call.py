"""Issue 19, item 8: the first wave of calls does not wait on an import.

httpcore imports anyio's asyncio backend (and its streams) at its first request; through
the CLI that import ran on the event loop inside the first wave, and every call of the wave
waited for it. A slot's own transport (runtime/transport.py) imports h11 with its module, and
behind a proxy the endpoint loads httpcore's backend when it builds its transports. Each case
runs in a fresh interpreter (a test session has imported everything long before) against
``tests/loopback.py``'s real server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopback import LoopbackServer, chat, chat_stream

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[2])
from conftest import endpoint_spec
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.http import Endpoint
from wildtrace.runtime.retry import RetryPolicy

async def main():
    spec = endpoint_spec("openai", route="m", base_url=sys.argv[1] + "/v1", stream=sys.argv[3] == "stream",
                         max_concurrency=2, timeout_s=30.0)
    provider = make_provider(spec)
    endpoint = Endpoint(provider, "sk-first-call", RetryPolicy(max_retries=0))
    before = set(sys.modules)
    result = await endpoint.call(provider.build_request("What failed?", Sampling(0.0, 64)))
    after = set(sys.modules)
    await endpoint.aclose()
    print(json.dumps({"ok": result.ok, "text": result.text, "imported": sorted(after - before)}))

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["stream", "plain"])
def test_the_first_call_imports_nothing(mode: str) -> None:
    def respond(call):
        return chat_stream("The pump failed.") if call.body.get("stream") else chat("The pump failed.")

    with LoopbackServer(respond) as server:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-c", SCRIPT, server.url, str(ROOT / "tests"), mode], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert len(server.calls) == 1
        assert server.calls[0].body.get("stream", False) is (mode == "stream")
    assert out["ok"] and out["text"] == "The pump failed."
    assert out["imported"] == []
