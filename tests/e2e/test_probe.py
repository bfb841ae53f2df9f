"""The window probe: pure search pieces, then against loopback endpoints that behave like
OpenAI (a context_length_exceeded 400 above a set size) and like a flaky one (429s, 500s)."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import TEST_KEY_ENV
from servers.loopback import Call, LoopbackServer, Reply, chat, error
from wildtrace import probe as P
from wildtrace.app import CONF_DIR
from wildtrace.config import to_settings
from wildtrace.core.caps import count_ideographs, is_cjk
from wildtrace.offline.extractive import split_answer_prompt
from wildtrace.runtime.net.secrets import MissingKeyError

LIMIT = {"en": 1_234_567, "cjk": 456_789}
#: OpenAI's reply to a prompt over the window (late 2026), word for word but the numbers.
CONTEXT_400 = {"error": {"message": "This model's maximum context length is 1047576 tokens. However, your messages "
                                    "resulted in 1100000 tokens. Please reduce the length of the messages.",
                         "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


def probe_settings(tmp_path: Path, url: str, *overrides: str) -> P.ProbeRunConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="probe", overrides=[
            f"root={tmp_path / 'outputs'}", "model=custom", "model.name=probed", "model.route=probe-me",
            f"model.base_url={url}/v1", f"model.api_key_env={TEST_KEY_ENV}", "retry.backoff_base_s=0.001",
            "retry.backoff_max_s=0.002", "probe.yes=true", f"probe.out={tmp_path / 'probed.yaml'}", *overrides])
    settings = to_settings(cfg)
    assert isinstance(settings, P.ProbeRunConfig)
    return settings


def document_of(call: Call) -> str:
    return split_answer_prompt(call.prompt)[1]


def windowed(call: Call) -> Reply:
    """Fits below LIMIT characters of its language, else OpenAI's context-length 400."""
    doc = document_of(call)
    language = "cjk" if is_cjk(count_ideographs(doc[:4000])) else "en"
    return chat("42") if len(doc) <= LIMIT[language] else Reply(400, CONTEXT_400)


# ------------------------------------------------------------------ pure pieces


@pytest.mark.parametrize("language,chars", [("en", 0), ("en", 1), ("en", 12_345), ("cjk", 777), ("cjk", 100_001)])
def test_filler_has_exactly_the_size_asked_and_the_right_script(language, chars):
    text = P.filler(language, chars)
    assert len(text) == chars
    if chars > 4000:
        assert is_cjk(count_ideographs(text[:4000])) is (language == "cjk")


@pytest.mark.parametrize("fits,misfits,resolution,narrow", [
    (1000, 1020, 0.02, True), (1000, 1021, 0.02, False), (10, 11, 0.02, True), (10, 12, 0.02, False),
    (1_000_000, 1_019_999, 0.02, True)])
def test_narrow_enough(fits, misfits, resolution, narrow):
    assert P.narrow_enough(fits, misfits, resolution) is narrow


@pytest.mark.parametrize("fits,misfits,expected", [(1000, 4_000_000, 63245), (10, 12, 11), (100, 10_000, 1000)])
def test_midpoint_is_geometric_and_strictly_inside(fits, misfits, expected):
    assert P.midpoint(fits, misfits) == expected


@pytest.mark.parametrize("fits,margin,round_to,cap", [
    (1_234_567, 0.05, 10_000, 1_170_000), (456_789, 0.05, 10_000, 430_000), (9_000, 0.1, 10_000, 8_100),
    (2_850_000, 0.0, 10_000, 2_850_000)])
def test_cap_is_rounded_down_with_the_margin(fits, margin, round_to, cap):
    settings = P.ProbeSettings(margin=margin, round_to=round_to)
    assert P.cap_of(P.Search("en", fits, None), settings) == cap


@pytest.mark.parametrize("limit", [1000, 1001, 5_000, 777_777, 3_999_999, 4_000_000, 9_999_999])
def test_search_brackets_any_limit_within_resolution_in_few_requests(limit):
    async def fits(chars: int) -> bool:
        return chars <= limit

    found = asyncio.run(P.search("en", 1000, 4_000_000, 0.02, 40, fits))
    assert found.fits <= limit
    if found.misfits is None:
        assert limit >= 4_000_000 and found.fits == 4_000_000
    else:
        assert found.misfits > limit and P.narrow_enough(found.fits, found.misfits, 0.02)
    bound = 2 + math.ceil(math.log2(math.log(4000) / math.log(1.02))) + 1
    assert len(found.tried) <= bound


def test_search_stops_at_the_request_bound():
    async def fits(chars: int) -> bool:
        return chars <= 2_000_000

    with pytest.raises(P.ProbeError, match="max_requests"):
        asyncio.run(P.search("en", 1000, 4_000_000, 0.0001, 5, fits))


def test_plan_cost_bounds_what_a_probe_sends():
    settings = P.ProbeSettings()
    requests, tokens = P.plan_cost(settings)
    assert 10 < requests <= settings.max_requests
    assert tokens > (settings.max_chars_en / 3.3)  # at least the largest English request


# ------------------------------------------------------------------ against loopback endpoints


def test_finds_the_window_within_its_margin(tmp_path, test_key):
    with LoopbackServer(windowed) as server:
        cfg = probe_settings(tmp_path, server.url)
        out = P.probe(cfg)
    assert out == tmp_path / "probed.yaml"
    written = OmegaConf.load(out)
    for language in ("en", "cjk"):
        cap = written.caps[language]
        assert cap <= LIMIT[language] * (1 - 0.05)  # never above the window, less the margin
        assert cap >= LIMIT[language] * (1 - 0.05) * (1 - 0.02) - 10_000  # and within resolution + rounding
        assert cap % 10_000 == 0
    assert len(server.calls) <= P.plan_cost(cfg.probe)[0]
    assert all(c.body["max_tokens"] == 16 for c in server.calls)
    assert all(c.headers["authorization"] == f"Bearer {test_key}" for c in server.calls)
    text = out.read_text()
    assert "probed on 20" in text and "geometric bisection" in text and "× (1 − 0.05)" in text
    assert test_key not in text
    assert (written.name, written.route, written.api_key_env) == ("probed", "probe-me", TEST_KEY_ENV)


@pytest.mark.slow
def test_intermittent_429_and_500_are_retried_never_taken_for_the_limit(tmp_path, test_key):
    lock, count = threading.Lock(), [0]

    def flaky(call: Call) -> Reply:
        with lock:
            count[0] += 1
            n = count[0]
        if n % 3 == 1:  # every third request fails, small or large, before the real answer
            return error(429, "Rate limit reached for requests", {"retry-after": "0"}) if n % 2 else error(500, "boom")
        return windowed(call)

    with LoopbackServer(windowed) as clean:
        clean_cfg = probe_settings(tmp_path, clean.url, f"probe.out={tmp_path / 'clean.yaml'}")
        P.probe(clean_cfg)
    with LoopbackServer(flaky) as server:
        P.probe(probe_settings(tmp_path, server.url))
    assert OmegaConf.load(tmp_path / "probed.yaml").caps == OmegaConf.load(tmp_path / "clean.yaml").caps
    assert any(c.seen > 0 for c in server.calls)  # the same body sent again: retried, not concluded


@pytest.mark.parametrize("status,message", [(429, "Rate limit reached"), (500, "internal error"),
                                            (503, "overloaded")])
def test_a_persistent_transient_error_stops_the_probe(tmp_path, test_key, status, message):
    def broken_above(call: Call) -> Reply:  # fine when small, a lasting error when large
        return error(status, message) if len(document_of(call)) > 100_000 else windowed(call)

    with (LoopbackServer(broken_above) as server,
          pytest.raises(P.ProbeError, match=r"retries_exhausted.*not a context-length error")):
        P.probe(probe_settings(tmp_path, server.url, "retry.max_retries=2"))
    assert not (tmp_path / "probed.yaml").exists()


def test_other_client_errors_stop_the_probe(tmp_path, test_key):
    with (LoopbackServer(lambda call: error(401, "Incorrect API key provided")) as server,
          pytest.raises(P.ProbeError, match=r"http_error.*401")):
        P.probe(probe_settings(tmp_path, server.url))
    assert len(server.calls) == 1  # not retried, not the limit


def test_declining_sends_nothing(tmp_path, test_key, capsys):
    with LoopbackServer(windowed) as server:
        cfg = probe_settings(tmp_path, server.url, "probe.yes=false")
        assert P.probe(cfg, ask=lambda prompt: "n") is None
        assert P.probe(cfg, ask=lambda prompt: (_ for _ in ()).throw(EOFError())) is None  # no terminal: no
    assert server.calls == []
    out = capsys.readouterr().out
    assert "at most" in out and "input tokens" in out and "nothing sent" in out


def test_missing_key_or_existing_file_fail_before_any_request(tmp_path, monkeypatch):
    monkeypatch.delenv(TEST_KEY_ENV, raising=False)
    with LoopbackServer(windowed) as server:
        with pytest.raises(MissingKeyError, match=TEST_KEY_ENV):
            P.probe(probe_settings(tmp_path, server.url))
        (tmp_path / "probed.yaml").write_text("name: keep-me\n")
        with pytest.raises(P.ProbeError, match="exists"):
            P.probe(probe_settings(tmp_path, server.url))
    assert server.calls == []
    assert (tmp_path / "probed.yaml").read_text() == "name: keep-me\n"


def test_probe_config_composes_over_every_model_and_rejects_typos():
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="probe", overrides=["model=gpt-4.1", "probe.margin=0.1"])
        assert (cfg.model.name, cfg.probe.margin, cfg.probe["yes"]) == ("gpt-4.1", 0.1, False)
        with pytest.raises(Exception, match=r"probe\.marginn"):
            compose(config_name="probe", overrides=["probe.marginn=0.1"])


@pytest.mark.slow
def test_the_command_line_asks_then_writes(tmp_path, test_key):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = tmp_path / "cli.yaml"
    with LoopbackServer(windowed) as server:
        args = [sys.executable, "-m", "wildtrace.probe", f"root={tmp_path}", "model=custom", "model.name=cli",
                "model.route=r", f"model.base_url={server.url}/v1", f"model.api_key_env={TEST_KEY_ENV}",
                f"probe.out={out}", "probe.languages=[en]"]
        declined = subprocess.run(args, input="n\n", capture_output=True, text=True, env=env, timeout=120)
        assert declined.returncode == 1 and "Send them? [y/N]" in declined.stdout and server.calls == []
        accepted = subprocess.run(args, input="y\n", capture_output=True, text=True, env=env, timeout=120)
    assert accepted.returncode == 0, accepted.stderr
    assert f"→ {out}" in accepted.stdout
    caps = OmegaConf.load(out).caps
    assert LIMIT["en"] * 0.95 * 0.98 - 10_000 <= caps.en <= LIMIT["en"] * 0.95
    assert "cjk: not probed" in out.read_text()


#: Each wire format's answer and its context-length 400, as the providers send them (late 2026).
WIRE = {
    "anthropic": (Reply(200, {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "42"}],
                              "stop_reason": "end_turn", "usage": {"input_tokens": 9, "output_tokens": 1}}),
                  Reply(400, {"type": "error",
                              "error": {"type": "invalid_request_error",
                                        "message": "prompt is too long: 208656 tokens > 200000 maximum"}})),
    "gemini": (Reply(200, {"candidates": [{"content": {"parts": [{"text": "42"}], "role": "model"},
                                           "finishReason": "STOP"}]}),
               Reply(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                     "message": "The input token count (1200293) exceeds the maximum number of "
                                                "tokens allowed (1048576)."}})),
}


@pytest.mark.parametrize("provider", sorted(WIRE))
def test_other_wire_formats_context_errors_are_read_the_same(tmp_path, test_key, provider):
    ok, too_long = WIRE[provider]

    def responder(call: Call) -> Reply:
        return ok if len(document_of(call)) <= LIMIT["en"] else too_long

    with LoopbackServer(responder) as server:
        out = P.probe(probe_settings(tmp_path, server.url, f"model.provider={provider}", f"model.base_url={server.url}",
                                     "probe.languages=[en]"))
    cap = OmegaConf.load(out).caps.en
    assert LIMIT["en"] * 0.95 * 0.98 - 10_000 <= cap <= LIMIT["en"] * 0.95


def test_the_written_file_is_a_valid_model_config(tmp_path, test_key):
    from wildtrace.config import ModelConfig

    with LoopbackServer(windowed) as server:
        out = P.probe(probe_settings(tmp_path, server.url, "probe.languages=[cjk]"))
    model = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(out)))
    assert isinstance(model, ModelConfig)
    assert model.caps.en == 2_850_000  # not probed: the model's own value, said so in a comment
    assert "en: not probed" in out.read_text()
