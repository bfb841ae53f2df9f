"""Routes that exist, judges that cannot change under you, model lists in preflight.

Retired first-party routes are refused before any request (the loopback server, standing in
as every client's proxy, receives nothing); a judge answered by another model is unavailable
with its reason (or warned); ``python -m wildtrace.check`` asks each endpoint's model list
(OpenAI-compatible, Anthropic with after_id pages, Gemini with pageToken pages) and names a
route the list lacks before any paid call.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import TEST_KEY_ENV, compose_config, endpoint_spec, make_task, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, error, sse
from wildtrace.app import CONF_DIR, prepare
from wildtrace.config import ConfigError
from wildtrace.config.checks import _conf_retirements, retirement_for
from wildtrace.core import records as R
from wildtrace.runtime.checks.catalog import Listing, ListingStatus, route_status
from wildtrace.runtime.run.execute import run
from wildtrace.runtime.net.served import MAX_SERVED_CHARS, ServedPolicy, default_pattern

ROOT = Path(__file__).resolve().parents[2]
CONF = Path(CONF_DIR)
MODEL_FILES = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
JUDGE_FILES = sorted(p.stem for p in (CONF / "judge").glob("*.yaml"))
JUDGE_OK = '{"points_awarded":[60,40],"total":100}'
DOC = "The pump failed at 03:14 because the seal was worn. " * 10
#: Variables that would point a file's default base_url elsewhere than its first-party host.
BASE_URL_VARS = ("GEMINI_BASE_URL", "DEEPSEEK_BASE_URL", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ARK_BASE_URL",
                 "MOONSHOT_BASE_URL", "ZHIPU_BASE_URL", "MINIMAX_BASE_URL", "DASHSCOPE_BASE_URL")


def retired_blocks() -> dict[str, dict]:
    """conf file (group/stem) → its ``retired:`` block, read straight from the YAML."""
    out = {}
    for group in ("model", "judge"):
        for path in sorted((CONF / group).glob("*.yaml")):
            node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            if node.get("retired"):
                out[f"{group}/{path.stem}"] = node["retired"]
    return out


RETIRED_FILES = sorted(retired_blocks())


def _file_overrides(group: str, stem: str) -> list[str]:
    if group == "model":
        return [f"model={stem}", "stage=answer", *(["model.route=x"] if stem == "custom" else [])]
    return ["judge_panel=offline", f"+judge@judge_panel.judges.j={stem}", "stage=all"]


# ---------------------------------------------------------------------- every file loads; retired ones refused


def test_the_retired_files_are_the_ones_the_review_found():
    assert RETIRED_FILES == ["judge/gemini_flash", "model/deepseek-v3.2", "model/gemini-2.5-pro"]
    for where, block in retired_blocks().items():
        assert block["date"] and block["message"] and block["routes"] and block["hosts"], where
        assert "read 2026-12-01" in block["source"], where


@pytest.mark.parametrize("group_stem", [f"model/{m}" for m in MODEL_FILES] + [f"judge/{j}" for j in JUDGE_FILES])
def test_every_model_and_judge_file_loads_and_only_retired_ones_are_refused(group_stem, monkeypatch):
    for var in BASE_URL_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WILDTRACE_GATEWAY_BASE_URL", "https://gateway.example/v1")
    group, stem = group_stem.split("/")
    cfg = compose_config(_file_overrides(group, stem))
    block = retired_blocks().get(group_stem)
    if block is None:
        settings_ = prepare(cfg)
        endpoint = settings_.model if group == "model" else settings_.judge_panel.judges["j"]
        assert endpoint.route and endpoint.route != "???"
        return
    with pytest.raises(ConfigError) as info:
        prepare(cfg)
    text = str(info.value)
    assert f"retired since {block['date']}" in text
    assert " ".join(block["message"].split()) in text
    assert "point " in text and ".base_url at a host that serves it" in text


@pytest.mark.parametrize(("route", "base_url", "refused"), [
    ("gemini-2.5-flash", "https://generativelanguage.googleapis.com", True),
    ("models/gemini-2.5-flash", "https://generativelanguage.googleapis.com/", True),  # Gemini's own id form
    ("GEMINI-2.5-Flash", "https://GenerativeLanguage.googleapis.com", True),  # case aside
    ("gemini-2.5-flash", "https://generativelanguage.googleapis.com/v1beta/openai", True),  # its OpenAI mode
    ("gemini-2.5-flash-lite", "https://generativelanguage.googleapis.com", False),  # another model
    ("gemini-2.5-flash", "https://openrouter.ai/api/v1", False),  # a gateway: runs
    ("gemini-2.5-flash", "http://127.0.0.1:8080", False),
    ("deepseek-chat", "https://api.deepseek.com/v1", True),  # V3.2's first-party ids
    ("deepseek/deepseek-v3.2", "https://api.deepseek.com", True),
    ("deepseek/deepseek-v3.2", "https://ai-gateway.vercel.sh/v1", False),
    ("deepseek-v4-pro", "https://api.deepseek.com/v1", False),
])
def test_a_retirement_applies_to_its_routes_at_its_first_party_hosts_only(route, base_url, refused):
    assert (retirement_for(route, base_url, _conf_retirements(CONF)) is not None) is refused


@pytest.mark.parametrize(("overrides", "refused"), [
    (["model=gemini-2.5-pro", "stage=answer"], True),
    (["model=gemini-2.5-pro", "stage=answer", "model.base_url=https://openrouter.ai/api/v1",
      "model.route=google/gemini-2.5-pro"], False),
    (["model=gemini-2.5-pro", "stage=answer", "access=gateway", "gateway.base_url=https://gw.example/v1"], False),
    (["model=gemini-2.5-pro", "stage=answer", "model.route=gemini-3.1-pro-preview"], False),
    (["model=gemini-2.5-pro", "stage=judge", "responses=r.json"], False),  # the model is not called
    (["model=custom", "model.route=gemini-2.5-pro", "model.provider=gemini", "stage=answer",
      "model.base_url=https://generativelanguage.googleapis.com"], True),  # custom, same route and host
    (["judge_panel=paper_only_gemini_flash"], True),
    (["judge_panel=paper_only_gemini_flash", "stage=answer"], False),  # no judging in this run
    (["judge_panel=paper_only_gemini_flash", "judge_panel.judges.gemini_flash.base_url=http://127.0.0.1:9"], False),
])
def test_the_override_rule(overrides, refused, monkeypatch):
    for var in BASE_URL_VARS:
        monkeypatch.delenv(var, raising=False)
    cfg = compose_config(overrides)
    if refused:
        with pytest.raises(ConfigError, match="is retired since"):
            prepare(cfg)
    else:
        prepare(cfg)


def _clean_env(proxy_url: str) -> dict[str, str]:
    """The environment of a CLI whose every outbound connection would reach the loopback (as its proxy)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_", "WILDTRACE_")) and k not in BASE_URL_VARS
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    env.update(PYTHONPATH=str(ROOT), HTTPS_PROXY=proxy_url, HTTP_PROXY=proxy_url, ALL_PROXY=proxy_url,
               GEMINI_API_KEY="gm-test-key", DEEPSEEK_API_KEY="ds-test-key", API_KEY="gw-test-key",
               WILDTRACE_GATEWAY_BASE_URL="https://gateway.example/v1")
    return env


def _paper_config(group: str, stem: str, block: dict) -> dict:
    """A §6 config.json naming the retired model (or judge) at its first-party host."""
    host = block["hosts"][0]
    provider = "gemini" if "googleapis" in host else "openai"
    base = f"https://{host}" + ("/v1" if provider == "openai" else "")
    if group == "model":
        return {"base_url": base, "model": block["routes"][0], "provider": provider}
    return {"base_url": "https://gateway.example/v1", "model": "my-model",
            "judges": [{"name": stem, "model": block["routes"][0], "provider": provider, "base_url": base}]}


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["run", "check", "paper"])
@pytest.mark.parametrize("group_stem", RETIRED_FILES)
def test_a_retired_file_fails_before_any_request_in_every_entry_point(group_stem, entry, tmp_path):
    group, stem = group_stem.split("/")
    block = retired_blocks()[group_stem]
    release = write_release(tmp_path / "release", [make_task("q0", "What failed?", "doc.txt")], {"doc.txt": DOC})
    with LoopbackServer(lambda call: Reply(502, {"error": "nothing may be sent"})) as proxy:
        env = _clean_env(proxy.url)
        data = [f"dataset.tasks={release[0]}", f"dataset.corpus={release[1]}", f"root={tmp_path / 'out'}"]
        if entry == "paper":
            config = tmp_path / "config.json"
            config.write_text(json.dumps(_paper_config(group, stem, block)))
            step = ["eval", "--out", str(tmp_path / "r.json")] if group == "model" else \
                ["judge", "--responses", str(tmp_path / "r.json"), "--out", str(tmp_path / "s.json")]
            if group != "model":  # the judge step reads its responses file first: one it can read
                (tmp_path / "r.json").write_text(json.dumps([{"question_id": "q0", "response": "It failed."}]))
            args = ["wildtrace.paper", step[0], "--config", str(config), "--data", str(release[0]),
                    "--corpus", str(release[1]), *step[1:]]
        else:
            args = ["wildtrace" if entry == "run" else "wildtrace.check", *data, *_file_overrides(group, stem)]
        proc = subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"is retired since {block['date']}" in proc.stderr
    assert " ".join(block["message"].split()) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proxy.calls == []  # nothing left the process: not even a CONNECT to the proxy
    assert not (tmp_path / "out" / "cache").exists()


# ---------------------------------------------------------------------- the served-model rule


@pytest.mark.parametrize(("route", "served", "ok"), [
    ("gemini-2.5-flash", "gemini-2.5-flash", True),
    ("gemini-2.5-flash", "models/gemini-2.5-flash", True),
    ("gemini-2.5-flash", "gemini-2.5-flash-001", True),  # a release suffix
    ("gemini-2.5-flash", "gemini-3.5-flash-lite", False),  # the retirement re-route
    ("gemini-2.5-flash", "gemini-2.5-flash-lite", False),  # a prefix is not the model
    ("gpt-4.1", "gpt-4.1-2025-04-14", True),
    ("gpt-4.1", "gpt-4.1-mini-2025-04-14", False),
    ("MiniMax-M2.7", "minimax-m2.7", True),  # case aside
    ("kimi-k2.6", "moonshotai/kimi-k2.6", True),  # a gateway's provider path
    ("mr.claude-sonnet-4-6-20260217", "claude-sonnet-4-6-20260217", True),  # the gateway's prefix
    ("mr.claude-sonnet-4-6-20260217", "claude-sonnet-4-6", True),  # the undated alias
    ("mr.claude-sonnet-4-6-20260217", "claude-sonnet-4-6-20251001", False),  # another snapshot
    ("doubao-seed-2-1-pro-260628", "doubao-seed-2-1-pro-260915", False),
    ("deepseek-v4-pro", "deepseek-flash", False),
    # release suffixes are dates in the forms providers use, or -001-style versions; nothing else
    ("gpt-4.1", "gpt-4.1-20250414", True),  # YYYYMMDD
    ("gpt-4.1", "gpt-4.1-250414", True),  # YYMMDD
    ("qwen3.5-plus", "qwen3.5-plus-0115", True),  # MMDD, as Qwen's snapshots
    ("qwen3.5-plus", "qwen3.5-plus-2026-01-15", True),  # YYYY-MM-DD
    ("gemini-2.0-flash", "gemini-2.0-flash-002", True),  # a -00N version
    ("mistral-medium", "mistral-medium-09-2025", True),  # MM-YYYY
    ("gpt-4.1", "gpt-4.1-999", False),  # not a version
    ("qwen3.5-plus", "qwen3.5-plus-999999", False),  # not a date
    ("qwen3.5-plus", "qwen3.5-plus-1399", False),  # month 13
    ("gpt-4.1", "gpt-4.1-2025-13-01", False),
    ("gpt-4.1", "gpt-4.1-latest", False),  # -latest only through served_model.expect
    ("gpt-4.1", "gpt-4.1-000", False),
    ("deepseek-r1-0528", "deepseek-r1-0528", True),  # a route dated MMDD accepts that date only
    ("deepseek-r1-0528", "deepseek-r1-0120", False),
])
def test_the_default_pattern_is_the_route_with_a_release_suffix(route, served, ok):
    assert ServedPolicy(default_pattern(route), "fail").matches(served) is ok


def test_a_name_past_the_bound_is_refused_not_cut_and_matched():
    rule = ServedPolicy(default_pattern("gpt-4.1"), "fail")
    long = "p/" * 95 + "pp/gpt-4.1-mini-2025-04-14"  # cut to the bound it would read ".../pp/gpt-4.1"
    assert len(long) > MAX_SERVED_CHARS and not rule.matches(long)
    assert len(long[:MAX_SERVED_CHARS]) == MAX_SERVED_CHARS and rule.matches(long[:MAX_SERVED_CHARS])  # at the bound


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_a_blank_name_after_a_named_chunk_is_refused_for_a_judge(tmp_path, test_key, provider):
    """Content chunks name the re-routed model, the last chunk names "": every name is checked."""
    names = ["gemini-3.5-flash-lite", "gemini-3.5-flash-lite", ""]
    pieces = [JUDGE_OK[:10], JUDGE_OK[10:], ""]
    if provider == "gemini":
        chunks = [{"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0,
                                   **({"finishReason": "STOP"} if i == 2 else {})}], "modelVersion": name,
                   **({"usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5}} if i == 2 else {})}
                  for i, (piece, name) in enumerate(zip(pieces, names, strict=True))]
        reply = sse(*chunks)
    else:
        chunks = [{"model": name, "choices": [{"index": 0, "delta": {"content": piece},
                                               "finish_reason": "stop" if i == 2 else None}]}
                  for i, (piece, name) in enumerate(zip(pieces, names, strict=True))]
        reply = sse(*chunks, done=True)
    with LoopbackServer(lambda call: reply) as server:
        cfg = _rerouted_run(tmp_path, server, provider)
        for judge in cfg.judge_panel.judges.values():
            judge.stream = True
            judge.route = "gemini-3.5-flash-lite"  # the content chunks' name matches: the blank one does not
        result = run(cfg)
    rows = json.loads((result.out_dir / "judgments.json").read_text())
    assert [(r["status"], r["reason"]) for r in rows] == \
        [(R.JudgmentStatus.UNAVAILABLE, R.FailReason.SERVED_MODEL_MISMATCH)] * 2
    assert rows[0]["served_model"] == 'gemini-3.5-flash-lite | ""'


def _release(tmp_path: Path, n: int = 2):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(n)]
    return write_release(tmp_path / "release", tasks, {"doc.txt": DOC})


def _judge_reply(provider: str, served: str) -> Reply:
    if provider == "gemini":
        return Reply(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": JUDGE_OK}]},
                                           "finishReason": "STOP"}],
                           "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5}, "modelVersion": served})
    if provider == "anthropic":
        return Reply(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": served,
                           "content": [{"type": "text", "text": JUDGE_OK}], "stop_reason": "end_turn",
                           "usage": {"input_tokens": 9, "output_tokens": 5}})
    reply = chat(JUDGE_OK)
    reply.body["model"] = served
    return reply


def _rerouted_run(tmp_path: Path, server: LoopbackServer, provider: str, served_model: dict | None = None):
    tasks, corpus = _release(tmp_path)
    route = {"gemini": "gemini-2.5-flash", "anthropic": "claude-sonnet-4-6", "openai": "qwen3.5-plus"}[provider]
    judge = {"name": route, "provider": provider, "route": route, "api_key_env": TEST_KEY_ENV, "stream": False,
             "base_url": server.url + ("/v1" if provider == "openai" else ""), **({"served_model": served_model}
                                                                                   if served_model else {})}
    return settings(tmp_path, ["model=extractive", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}"],
                    judges={"judge_a": judge})


@pytest.mark.parametrize(("provider", "served"), [("gemini", "gemini-3.5-flash-lite"),
                                                  ("anthropic", "claude-sonnet-5-5"), ("openai", "qwen3.8-plus")])
def test_a_judge_answered_by_another_model_is_unavailable_with_its_reason(tmp_path, test_key, provider, served):
    with LoopbackServer(lambda call: _judge_reply(provider, served)) as server:
        result = run(_rerouted_run(tmp_path, server, provider))
        sent = len(server.calls)
        again = run(_rerouted_run(tmp_path, server, provider))  # cached, and refused on every read
        assert len(server.calls) == sent == 2  # the rerun paid nothing
    for outcome in (result, again):
        rows = json.loads((outcome.out_dir / "judgments.json").read_text())
        assert [(r["status"], r["reason"], r["total"], r["served_model"]) for r in rows] == \
            [(R.JudgmentStatus.UNAVAILABLE, R.FailReason.SERVED_MODEL_MISMATCH, None, served)] * 2
        assert all(r["error"].startswith(f"served by {served!r}, not the route") for r in rows)
        assert all(r["reply"] == JUDGE_OK for r in rows)  # the paid reply is kept, as evidence
        assert outcome.stats["served_models"]["judge_a"] == [served]
        assert outcome.stats["served_model_rules"]["judge_a"]["on_mismatch"] == "fail"
        assert [w["code"] for w in outcome.stats["warnings"]] == ["served_model_mismatch"]
        assert f"2 response(s) name {served!r}, not the route" in outcome.headline
        assert "(served_model_mismatch 2)" in outcome.headline
        assert outcome.summary["n_scored"] == 0 and outcome.exit_code == 1  # every judge call failed
    assert again.stats["cache_hits"] == 4  # two answers and two judgments


def test_a_judge_set_to_warn_is_judged_and_warned_from_the_same_cache(tmp_path, test_key):
    with LoopbackServer(lambda call: _judge_reply("gemini", "gemini-3.5-flash-lite")) as server:
        failed = run(_rerouted_run(tmp_path, server, "gemini"))
        warned = run(_rerouted_run(tmp_path, server, "gemini", {"on_mismatch": "warn"}))
        assert len(server.calls) == 2  # the same cached replies, read under the other rule
    assert failed.summary["n_scored"] == 0
    rows = json.loads((warned.out_dir / "judgments.json").read_text())
    assert [(r["status"], r["total"]) for r in rows] == [(R.JudgmentStatus.SCORED, 100)] * 2
    assert all(any(n.startswith("served_model_mismatch (warned)") for n in r["notes"]) for r in rows)
    assert [w["code"] for w in warned.stats["warnings"]] == ["served_model"]
    assert "warning: judge_a: asked for route 'gemini-2.5-flash', the responses name 'gemini-3.5-flash-lite'" \
        in warned.headline
    assert warned.summary["n_scored"] == 2 and warned.exit_code == 0


def test_a_configured_pattern_accepts_the_models_it_names(tmp_path, test_key):
    with LoopbackServer(lambda call: _judge_reply("openai", "qwen3.5-plus-2026-02-15")) as server:
        result = run(_rerouted_run(tmp_path, server, "openai", {"expect": "qwen3\\.5-plus(-[0-9-]+)?"}))
    assert result.summary["n_scored"] == 2 and result.stats["warnings"] == []
    assert result.stats["served_model_rules"]["judge_a"] == {"expect": "qwen3\\.5-plus(-[0-9-]+)?",
                                                            "on_mismatch": "fail", "derived": False}


def test_the_model_warns_by_default_and_fails_when_set_so(tmp_path, test_key):
    def responder(call: Call) -> Reply:
        reply = chat("The seal was worn.")
        reply.body["model"] = "other-model"
        return reply

    tasks, corpus = _release(tmp_path / "a", n=1)
    base = ["model=custom", "model.route=test-model", "model.stream=false", f"model.api_key_env={TEST_KEY_ENV}",
            f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "stage=answer"]
    with LoopbackServer(responder) as server:
        warned = run(settings(tmp_path / "a", [*base, f"model.base_url={server.url}/v1"]))
        failed = run(settings(tmp_path / "b", [*base, f"model.base_url={server.url}/v1",
                                               "model.served_model.on_mismatch=fail"]))
    (row,) = json.loads((warned.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.ANSWERED and any("served_model_mismatch (warned)" in n for n in row["notes"])
    (row,) = json.loads((failed.out_dir / "responses.json").read_text())
    assert (row["status"], row["reason"], row["served_model"]) == \
        (R.AnswerStatus.FAILED, R.FailReason.SERVED_MODEL_MISMATCH, "other-model")


@pytest.mark.parametrize(("override", "message"), [
    ("judge_panel.judges.qwen.served_model.on_mismatch=ignore", "on_mismatch must be one of warn, fail"),
    ("judge_panel.judges.qwen.served_model.expect='qwen('", "expect is not a regular expression"),
])
def test_a_bad_rule_is_a_config_error_before_any_request(tmp_path, override, message):
    with LoopbackServer(lambda call: Reply(500, {})) as server:
        cfg = settings(tmp_path, ["judge_panel=paper_only_qwen", f"judge_panel.judges.qwen.base_url={server.url}/v1",
                                  override])
        with pytest.raises(ConfigError, match=message):
            run(cfg)
        assert server.calls == []


# ---------------------------------------------------------------------- model lists: what they say of a route
# (the lists' requests, pages and paging: tests/providers/test_model_lists.py)


TODAY = datetime.date(2026, 12, 1)


@pytest.mark.parametrize(("route", "listing", "status", "text", "blocks"), [
    ("gpt-5.5", Listing(["gpt-5.5", "gpt-4.1"]), ListingStatus.LISTED, "listed", False),
    ("gpt-4.1", Listing(["gpt-4.1"], {"gpt-4.1": "2027-01-14"}), ListingStatus.LISTED,
     "listed (shutdown_date 2027-01-14)", False),
    ("gpt-4.1", Listing(["gpt-4.1"], {"gpt-4.1": "2026-12-01"}), ListingStatus.RETIRED,
     "RETIRED: listed with shutdown_date 2026-12-01", True),  # shut down today
    ("gpt-4.1", Listing(["gpt-4.1-2025-04-14"]), ListingStatus.ALIAS, "listed as gpt-4.1-2025-04-14", False),
    ("minimax-m2.7", Listing(["MiniMax-M2.7"]), ListingStatus.LISTED, "listed as MiniMax-M2.7", False),
    ("deepseek-v4", Listing(["deepseek-flash", "deepseek-v4-pro"]), ListingStatus.MISSING,
     "MISSING: not among the 2 models the endpoint lists; nearest: deepseek-v4-pro, deepseek-flash", True),
    ("ep-20260601-abc", Listing(["doubao-seed-2-1-pro-260628"]), ListingStatus.NO_LIST,
     "not listed (an endpoint id; 1 models listed)", False),
    ("x", Listing(None, why="timeout"), ListingStatus.NO_LIST, "no model list (timeout)", False),
])
def test_route_status(route, listing, status, text, blocks):
    got = route_status(endpoint_spec("openai", route=route), listing, today=TODAY)
    assert (got.status, got.text, got.blocks) == (status, text, blocks)


def test_offline_endpoints_are_not_asked():
    assert route_status(endpoint_spec("offline"), None).status == ListingStatus.NOT_ASKED


def _check(tmp_path: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    return subprocess.run([sys.executable, "-m", "wildtrace.check", f"root={tmp_path}", *overrides], cwd=tmp_path,
                          env={**base, "PYTHONPATH": str(ROOT), **(env or {})}, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_check_names_a_route_the_model_list_lacks_before_any_paid_call(tmp_path, test_key):
    def responder(call: Call) -> Reply:
        if call.method == "GET":
            return Reply(200, {"object": "list", "data": [{"id": "test-model-2", "object": "model"},
                                                          {"id": "qwen3.5-plus", "object": "model"}]})
        return chat(JUDGE_OK if call.route == "qwen3.5-plus" else "The door was green.")

    with LoopbackServer(responder) as server:
        proc = _check(tmp_path, "model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                      f"model.api_key_env={TEST_KEY_ENV}", "judge_panel=paper_only_qwen",
                      f"judge_panel.judges.qwen.base_url={server.url}/v1",
                      f"judge_panel.judges.qwen.api_key_env={TEST_KEY_ENV}", env={TEST_KEY_ENV: test_key})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "model list: model: test-model: MISSING: not among the 2 models the endpoint lists; nearest: test-model-2" \
        in proc.stdout
    assert "model list: qwen: qwen3.5-plus: listed" in proc.stdout
    assert "1 of 2 endpoints failed: model" in proc.stderr
    posts = [c for c in server.calls if c.method == "POST"]
    assert [c.route for c in posts] == ["qwen3.5-plus"]  # the missing route was not paid for
    gets = [c for c in server.calls if c.method == "GET"]
    assert [c.path for c in gets] == ["/v1/models"] * 2 and all(c.headers["authorization"] == f"Bearer {test_key}"
                                                                for c in gets)
    assert proc.stdout.index("model list: model") < proc.stdout.index("\nendpoint ")  # reported before the table
    assert test_key not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_check_without_a_model_list_still_passes_and_flags_a_rerouted_judge(tmp_path, test_key):
    def responder(call: Call) -> Reply:
        if call.method == "GET":
            return error(404, "Not Found")
        return _judge_reply("openai", "qwen3.8-plus")

    with LoopbackServer(responder) as server:
        common = ["stage=judge", "responses=r.json", "judge_panel=paper_only_qwen",
                  f"judge_panel.judges.qwen.base_url={server.url}/v1",
                  f"judge_panel.judges.qwen.api_key_env={TEST_KEY_ENV}"]
        failed = _check(tmp_path, *common, env={TEST_KEY_ENV: test_key})
        warned = _check(tmp_path, *common, "judge_panel.judges.qwen.served_model.on_mismatch=warn",
                        env={TEST_KEY_ENV: test_key})
    assert "model list: qwen: qwen3.5-plus: no model list (HTTP 404)" in failed.stdout
    assert failed.returncode == 1 and "served_model_mismatch" in failed.stdout
    assert "served by 'qwen3.8-plus'" in failed.stdout
    assert warned.returncode == 0, warned.stdout + warned.stderr


@pytest.mark.slow
def test_probe_refuses_a_retired_model_before_any_request(tmp_path):
    """``wildtrace.probe`` sends only the model's requests: a retired model route is refused first."""
    stem = next(g.split("/")[1] for g in RETIRED_FILES if g.startswith("model/"))
    block = retired_blocks()[f"model/{stem}"]
    with LoopbackServer(lambda call: Reply(502, {"error": "nothing may be sent"})) as proxy:
        proc = subprocess.run([sys.executable, "-m", "wildtrace.probe", f"model={stem}", f"root={tmp_path / 'out'}"],
                              cwd=tmp_path, env=_clean_env(proxy.url), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"is retired since {block['date']}" in proc.stderr and "Traceback" not in proc.stderr
    assert proxy.calls == []
