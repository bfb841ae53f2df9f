"""A provider is one module and one registry line.

``AcmeProvider`` below is a new provider written as a contributor would write it: one class
(an OpenAI-compatible API with its own key header, version header, temperature range and
reasoning field), registered with one line. Nothing else in wildtrace is edited, and a real
``run`` goes through it end to end against a scripted server on 127.0.0.1 that answers only
what that API's "documentation" says it takes; config, the key check, the model list and the
batch check all read its facts from the class.

The table test pins the facts of the four built-in providers to what they were before they
moved onto the classes, and the source test keeps them there: no module outside providers/
compares a provider's name to a literal.
"""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from conftest import TEST_KEY_ENV, make_task, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, chat_stream, error
from wildtrace.config import ConfigError
from wildtrace.providers.base import NO_REASONING_CONTROL, Provider, Sampling
from wildtrace.providers.openai import OpenAIProvider
from wildtrace.providers.registry import PROVIDERS, batch_providers, provider_class

PACKAGE = Path(__file__).resolve().parents[2] / "wildtrace"


# --------------------------------------------------------------------------------------
# the new provider: this class is the whole module a contributor writes
# --------------------------------------------------------------------------------------


class AcmeProvider(OpenAIProvider):
    """Acme's chat API: OpenAI's shape, the key in ``X-Acme-Key``, a version header, 0–1.5."""

    name = "acme"
    temperature_range = (0.0, 1.5)
    batch_api = None  # Acme has no batch API
    api_headers: ClassVar[dict[str, str]] = {"acme-version": "2026-11-01"}
    reasoning_formats: ClassVar[dict[str, str]] = {
        "acme": "effort: <level> (Acme's own field)",
        "none": NO_REASONING_CONTROL,
    }

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The key goes in X-Acme-Key."""
        return {"X-Acme-Key": api_key}

    def _reasoning(self, sampling: Sampling) -> dict[str, Any]:
        level = sampling.reasoning_effort
        self.check_reasoning(self.spec.reasoning_format, level, self.spec.route)
        return {} if level is None or self.reasoning_format() == "none" else {"effort": level}

    @classmethod
    def model_list(cls, token: str | None) -> tuple[str, dict[str, str]]:
        """Acme lists its models under /catalog."""
        return "/catalog", {}


@pytest.fixture
def acme(monkeypatch):
    monkeypatch.setitem(PROVIDERS, AcmeProvider.name, AcmeProvider)  # the one registry line
    return AcmeProvider


MODEL, JUDGE = "acme-large", "acme-judge"
KEY = "sk-acme-canary-" + "5e" * 8
DOC = "The pump failed at 03:14 because the seal was worn. " * 10
ANSWER = "The seal was worn; it failed at 03:14."


def acme_api(call: Call) -> Reply:
    """Acme's API as its documentation has it: a key and a version header, or 401 / 400."""
    if call.headers.get("x-acme-key") != KEY or "authorization" in call.headers:
        return error(401, "missing X-Acme-Key")
    if call.headers.get("acme-version") != "2026-11-01":
        return error(400, "Acme-Version header required")
    if call.method == "GET":
        return Reply(200, {"data": [{"id": MODEL}, {"id": JUDGE}]})
    if call.path != "/v1/chat/completions" or "reasoning_effort" in call.body:
        return error(400, f"unknown path or field: {call.path}")
    text = ANSWER if call.route == MODEL else json.dumps({"points_awarded": [60, 0], "total": 60})
    return chat_stream(text) if call.body.get("stream") else chat(text)


def acme_endpoint(url: str, route: str) -> dict:
    return {"name": route, "provider": "acme", "route": route, "base_url": url + "/v1", "api_key_env": TEST_KEY_ENV}


def acme_settings(tmp_path: Path, url: str, extra: list[str] | None = None):
    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"Why did the pump fail? ({i})", "doc.txt")
                                             for i in range(3)], {"doc.txt": DOC})
    return settings(tmp_path, [
        "model=custom", "model.provider=acme", f"model.route={MODEL}", f"model.base_url={url}/v1",
        f"model.api_key_env={TEST_KEY_ENV}", "model.reasoning_format=acme", "decoding.reasoning_effort=high",
        "decoding.temperature=1.2", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", *(extra or []),
    ], judges={"acme_judge": acme_endpoint(url, JUDGE)})


def test_a_new_provider_runs_end_to_end(acme, tmp_path, monkeypatch):
    from wildtrace.runtime.run.execute import run

    monkeypatch.setenv(TEST_KEY_ENV, KEY)
    with LoopbackServer(acme_api) as server:
        result = run(acme_settings(tmp_path, server.url))
        calls = list(server.calls)
    rows = json.loads((result.out_dir / "responses.json").read_text())
    scores = json.loads((result.out_dir / "scores.json").read_text())
    assert [(r["status"], r["response"]) for r in rows] == [("answered", ANSWER)] * 3
    assert [c.route for c in calls].count(MODEL) == 3 and [c.route for c in calls].count(JUDGE) == 3
    answers = [c.body for c in calls if c.route == MODEL]
    assert all(b["effort"] == "high" and b["temperature"] == 1.2 and b["stream"] is True for b in answers)
    assert all(c.headers["x-acme-key"] == KEY and c.headers["acme-version"] == "2026-11-01" for c in calls)
    judged = [t["judges"]["acme_judge"] for t in scores["tasks"]]
    assert judged == [{"status": "scored", "total": 60.0, "score": 0.6, "reason": None}] * 3
    assert (scores["n_total"], scores["n_scored"], scores["overall"]) == (3, 3, pytest.approx(60.0))
    assert all(KEY.encode() not in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_the_model_list_is_the_classes(acme, tmp_path):
    from wildtrace.runtime.checks.catalog import ListingStatus, list_models, route_status
    from wildtrace.runtime.run.plan import endpoint_spec

    with LoopbackServer(acme_api) as server:
        cfg = acme_settings(tmp_path, server.url)
        spec = endpoint_spec("model", cfg.model)
        listing = asyncio.run(list_models(spec, KEY))
        calls = list(server.calls)
    assert [(c.method, c.path) for c in calls] == [("GET", "/v1/catalog")]
    assert listing.ids == [MODEL, JUDGE]
    assert route_status(spec, listing).status == ListingStatus.LISTED


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("decoding.temperature=1.6", "decoding.temperature must be within [0.0, 1.5] for model (acme), got 1.6"),
        ("model.reasoning_format=openai",
         "model.reasoning_format: reasoning_format 'openai' does not apply to provider 'acme' "
         "(choose from acme, none)"),
        ("model.batch=true", "model.batch=true: provider 'acme' has no batch mode here (choose from openai, "
                             "anthropic, gemini, or set model.batch=false)"),
    ],
)
def test_config_reads_the_new_providers_facts(acme, tmp_path, override, message):
    with pytest.raises(ConfigError) as info:
        acme_settings(tmp_path, "http://127.0.0.1:9", [override])
    assert str(info.value) == message


def test_an_unregistered_provider_is_refused_naming_the_registered_ones(tmp_path):
    with pytest.raises(ConfigError) as info:
        acme_settings(tmp_path, "http://127.0.0.1:9")
    assert str(info.value) == ("model.provider: unknown provider 'acme' "
                               "(choose from openai, anthropic, gemini, offline)")


# --------------------------------------------------------------------------------------
# the built-in providers' facts, as they were before they moved onto the classes
# --------------------------------------------------------------------------------------

OPENAI_FORMATS = ("openai", "openrouter", "qwen", "thinking", "deepseek", "doubao", "minimax", "none")


@pytest.mark.parametrize(
    ("name", "temperatures", "formats", "local", "batch", "headers"),
    [
        ("openai", (0.0, 2.0), OPENAI_FORMATS, False, "openai", {}),
        ("anthropic", (0.0, 1.0), ("anthropic-budget", "anthropic-adaptive", "none"), False, "anthropic",
         {"anthropic-version": "2023-06-01"}),
        ("gemini", (0.0, 2.0), ("gemini-budget", "gemini-level", "none"), False, "gemini", {}),
        ("offline", (0.0, 2.0), OPENAI_FORMATS, True, None, {}),
    ],
)
def test_builtin_provider_facts(name, temperatures, formats, local, batch, headers):
    cls = PROVIDERS[name]
    assert (cls.name, cls.temperature_range, tuple(cls.reasoning_formats), cls.local,
            cls.batch_api.provider if cls.batch_api else None, dict(cls.api_headers)) == \
        (name, temperatures, formats, local, batch, headers)


@pytest.mark.parametrize(
    ("name", "route", "default"),
    [("openai", "gpt-5.4", "openai"), ("offline", "extractive-bm25", "openai"),
     ("anthropic", "claude-sonnet-4-6", "anthropic-adaptive"), ("anthropic", "claude-sonnet-4-5", "anthropic-budget"),
     ("gemini", "gemini-2.5-flash", "gemini-budget"), ("gemini", "gemini-3-flash", "gemini-level")],
)
def test_default_reasoning_format_by_route(name, route, default):
    assert PROVIDERS[name].default_reasoning_format(route) == default


def test_registry_facts_are_consistent():
    from wildtrace.providers.batch import BatchAPI

    assert batch_providers() == ["openai", "anthropic", "gemini"]
    for cls in PROVIDERS.values():
        if cls.batch_api is not None:  # a batch format, kept in the provider's own package
            assert issubclass(cls.batch_api, BatchAPI) and cls.batch_api.provider == cls.name
            assert cls.batch_api.__module__ == cls.__module__.rsplit(".", 1)[0] + ".batch"
        assert "none" in cls.reasoning_formats
        assert cls.local == hasattr(cls, "answer_locally")  # the HTTP layer gives that method its transport
        low, high = cls.temperature_range
        assert 0.0 <= low < high
    assert provider_class("no-such-provider") is Provider  # the base facts: not local, no batch, 0-2


def _name_comparisons(path: Path) -> list[str]:
    """``x.provider == "openai"``-style comparisons (and ``in`` a literal tuple) in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
        names |= {e.value for s in sides if isinstance(s, (ast.Tuple, ast.Set, ast.List))
                  for e in s.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if names & set(PROVIDERS):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_no_module_outside_providers_compares_a_provider_name():
    outside = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "providers"]
    assert [hit for p in sorted(outside) for hit in _name_comparisons(p)] == []
