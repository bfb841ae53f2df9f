"""``python -m wildtrace.probe model=<m>``: find a model's real context window (spec §3).

A search over synthetic filler documents, in English and in Chinese, sent as the spec's
own answer prompt with a tiny completion budget: a 2xx means the document fits, a reply
the harness reads as ``context_length`` means it does not, and anything else (a 429 or a
5xx that outlasts the harness's retries, a 401, a 404) stops the probe with that error —
it is never taken for the limit. The search halves the gap between the largest size that
fitted and the smallest that did not, geometrically, until they are within
``probe.resolution`` of each other. The caps written are the largest size that fitted,
less ``probe.margin``, rounded down to ``probe.round_to`` characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from wildtrace.config import ConfigError, WildtraceConfig, register, to_settings
from wildtrace.config.checks import check_retired
from wildtrace.core.caps import CHARS_PER_TOKEN
from wildtrace.core.prompts import answer_prompt
from wildtrace.core.records import CallResult, FailReason
from wildtrace.providers.base import Provider
from wildtrace.exitcodes import ExitCode, fail

log = logging.getLogger(__name__)

QUESTION = {"en": "What is the number of the last numbered line in the document?",
            "cjk": "文档中最后一行的编号是多少？"}
_EN_LINES = ("Line {n}: the survey crew logged the river gauge at {m} centimetres before noon.",
             "Line {n}: a courier left the northern depot with {m} sealed crates and a spare wheel.",
             "Line {n}: the archive clerk filed report {m} under maintenance, second shelf, left side.",
             "Line {n}: wind from the west reached {m} knots and the harbour flags were lowered.")
_CJK_LINES = ("第{n}行：测量队在中午之前记录了河流水位，读数为{m}厘米。",
              "第{n}行：信使带着{m}个密封箱子和一个备用车轮离开了北方仓库。",
              "第{n}行：档案管理员把第{m}号报告归入维修类，放在第二层左侧。",
              "第{n}行：西风达到{m}节，港口的旗帜随即降下。")


@dataclass
class ProbeSettings:
    """conf/probe.yaml: how to search and where to write."""

    yes: bool = False  #: skip the cost question (a script, a CI job)
    languages: list[str] = field(default_factory=lambda: ["en", "cjk"])  #: filler languages to probe
    min_chars: int = 1000  #: the smallest document tried; it must fit
    max_chars_en: int = 4_000_000  #: the largest English document tried (above the spec's largest cap)
    max_chars_cjk: int = 1_500_000  #: the largest Chinese document tried
    resolution: float = 0.02  #: stop when the largest fit and smallest misfit are this close (relative)
    margin: float = 0.05  #: caps = largest fit × (1 − margin): the question and template need room too
    round_to: int = 10_000  #: caps rounded down to a multiple of this many characters
    max_tokens: int = 16  #: the completion budget of every probe request
    max_requests: int = 40  #: a hard bound on requests over all languages
    out: str | None = None  #: the model file to write (default conf/model/<model.name>.yaml)
    overwrite: bool = False  #: replace an existing model file


@dataclass
class ProbeRunConfig(WildtraceConfig):
    """The harness's config (the same conf tree) with the probe's settings."""

    probe: ProbeSettings = field(default_factory=ProbeSettings)  #: the probe's own settings


class ProbeError(RuntimeError):
    """The probe cannot tell the window: an error that is not the context length."""


class ProbeInputError(ProbeError):
    """The probe refuses to start (nothing sent): bad input, exit 2 rather than a failed probe's 1."""


def filler(language: str, chars: int) -> str:
    """A synthetic document of exactly ``chars`` characters: numbered lines of plain prose."""
    lines = _EN_LINES if language == "en" else _CJK_LINES
    parts, total, n = [], 0, 0
    while total < chars:
        line = lines[n % len(lines)].format(n=n + 1, m=(n * 7919) % 1000) + "\n"
        parts.append(line)
        total += len(line)
        n += 1
    return "".join(parts)[:chars]


def midpoint(fits: int, misfits: int) -> int:
    """The next size to try: the geometric mean of the bracket (sizes span orders of magnitude)."""
    return max(fits + 1, min(misfits - 1, int(math.sqrt(fits * misfits))))


def narrow_enough(fits: int, misfits: int, resolution: float) -> bool:
    """True when the bracket is within ``resolution`` (relative) or a single character."""
    return misfits - fits <= max(1, int(fits * resolution))


@dataclass
class Search:
    """One language's search: the bracket found and the sizes tried."""

    language: str  #: "en" or "cjk"
    fits: int  #: the largest document (characters) that fitted
    misfits: int | None  #: the smallest that did not (None: even the largest tried fitted)
    tried: list[tuple[int, bool]] = field(default_factory=list)  #: (characters, fitted) in order


async def search(language: str, lo: int, hi: int, resolution: float, budget: int,
                 fits: Callable[[int], Awaitable[bool]]) -> Search:
    """Bracket the window between ``lo`` (must fit) and ``hi``, at most ``budget`` calls of ``fits``."""
    result = Search(language, 0, None)

    async def trial(chars: int) -> bool:
        if len(result.tried) >= budget:
            raise ProbeError(f"{language}: probe.max_requests reached before the window was found "
                             f"(bracket {result.fits}–{result.misfits} characters)")
        ok = await fits(chars)
        result.tried.append((chars, ok))
        return ok

    if not await trial(lo):
        raise ProbeError(f"{language}: even {lo} characters exceed the context window (probe.min_chars)")
    result.fits = lo
    if await trial(hi):
        result.fits = hi
        return result
    result.misfits = hi
    while not narrow_enough(result.fits, result.misfits, resolution):
        chars = midpoint(result.fits, result.misfits)
        if await trial(chars):
            result.fits = chars
        else:
            result.misfits = chars
    return result


def plan_cost(settings: ProbeSettings) -> tuple[int, int]:
    """(requests, input tokens) at most: the searches simulated with the window just below the
    largest size tried (the costliest) and at the smallest (the longest walk down)."""
    requests, tokens = 0, 0
    for language in settings.languages:
        hi = _max_chars(settings, language)
        worst = (0, 0)
        for limit in (hi - 1, settings.min_chars):
            sizes: list[int] = []

            async def oracle(chars: int, limit: int = limit, sizes: list[int] = sizes) -> bool:
                sizes.append(chars)
                return chars <= limit

            with contextlib.suppress(ProbeError):
                asyncio.run(search(language, settings.min_chars, hi, settings.resolution, settings.max_requests,
                                   oracle))
            worst = (max(worst[0], len(sizes)), max(worst[1], int(sum(sizes) / CHARS_PER_TOKEN[language])))
        requests, tokens = requests + worst[0], tokens + worst[1]
    return min(requests, settings.max_requests), tokens


def _max_chars(settings: ProbeSettings, language: str) -> int:
    return settings.max_chars_en if language == "en" else settings.max_chars_cjk


def cap_of(found: Search, settings: ProbeSettings) -> int:
    """The cap to write: the largest fit less the margin, rounded down (never below round_to)."""
    raw = int(found.fits * (1.0 - settings.margin))
    step = settings.round_to if raw >= settings.round_to else 1
    return max(1, raw // step * step)


async def _call(cfg: WildtraceConfig, provider: Provider, key: str | None, request: Any) -> CallResult:
    """One request through the harness's own call path (retry layer, error reading), no cache.

    The only place the probe touches the runtime's HTTP layer, so it can be re-pointed.
    """
    from wildtrace.runtime.store.cache import Cache
    from wildtrace.runtime.run.plan import make_endpoint, retry_policy

    # A probe must ask the endpoint every time: the cache is off (it reads and writes nothing).
    endpoint = make_endpoint(provider, key, retry_policy(cfg.retry), Cache(Path(cfg.cache.dir), enabled=False),
                             lambda label: None)
    try:
        return await endpoint.call(request, 0)
    finally:
        await endpoint.aclose()


def _fits_via_harness(cfg: ProbeRunConfig, key: str | None, language: str) -> Callable[[int], Awaitable[bool]]:
    from wildtrace.providers.base import Sampling
    from wildtrace.providers.registry import make_provider
    from wildtrace.runtime.run.plan import model_spec

    provider = make_provider(dataclasses.replace(model_spec(cfg), max_concurrency=1))  # one call at a time
    sampling = Sampling(cfg.decoding.temperature, cfg.probe.max_tokens)

    async def fits(chars: int) -> bool:
        request = provider.build_request(answer_prompt(QUESTION[language], filler(language, chars)), sampling)
        result = await _call(cfg, provider, key, request)
        if result.http_status is not None and 200 <= result.http_status < 300:
            log.info("probe %s: %d characters fit", language, chars)
            return True
        if result.reason == FailReason.CONTEXT_LENGTH:
            log.info("probe %s: %d characters exceed the window", language, chars)
            return False
        raise ProbeError(f"{language} at {chars} characters: {result.reason}: {result.error} — not a context-length "
                         "error, so it says nothing about the window; fix it and probe again")

    return fits


def model_yaml(cfg: ProbeRunConfig, caps: dict[str, int], found: list[Search], date: str) -> str:
    """A ready conf/model file: the model's settings with the probed caps, the date and the method."""
    m, p = cfg.model, cfg.probe
    lines = [f"# {m.name}: context caps probed on {date} by `python -m wildtrace.probe` (spec §3).",
             "# Method: the spec's answer prompt over synthetic filler documents (English and Chinese),",
             f"# max_tokens={p.max_tokens}; geometric bisection on characters to {100 * p.resolution:g}%; only a",
             "# context-length error counts as too long (429/5xx are retried, other errors stop the probe).",
             f"# Caps = largest size that fitted × (1 − {p.margin:g}), rounded down to {p.round_to} characters."]
    for s in found:
        misfit = s.misfits if s.misfits is not None else "(never: the largest size tried fitted)"
        lines.append(f"#   {s.language}: fitted {s.fits} chars, did not fit {misfit}; {len(s.tried)} requests")
    for language in sorted({"en", "cjk"} - {s.language for s in found}):
        lines.append(f"#   {language}: not probed (kept the model's value)")
    fields = {"name": m.name, "provider": m.provider, "route": m.route, "base_url": m.base_url,
              "api_key_env": m.api_key_env, "send_temperature": m.send_temperature, "reasoning": m.reasoning,
              "budget_field": m.budget_field, "max_concurrency": m.max_concurrency, "timeout_s": m.timeout_s}
    from omegaconf import OmegaConf

    body = OmegaConf.to_yaml({**fields, "caps": {"en": caps.get("en", m.caps.en), "cjk": caps.get("cjk", m.caps.cjk)},
                              **({"extra_body": dict(m.extra_body)} if m.extra_body else {})})
    return "\n".join(lines) + "\n" + body


def _confirm(settings: ProbeSettings, requests: int, tokens: int, ask: Callable[[str], str] = input) -> bool:
    print(f"probe: at most {requests} requests, about {tokens:,} input tokens in all "
          f"(~{CHARS_PER_TOKEN['en']} chars/token EN, ~{CHARS_PER_TOKEN['cjk']} CJK), {settings.max_tokens} output "
          "tokens each.")
    if settings.yes:
        return True
    try:
        return ask("Send them? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _check_out(out: Path) -> None:
    """probe.out must be a file (or nothing yet) in a folder that takes writes; ProbeError naming it otherwise."""
    from wildtrace.files import file_kind
    from wildtrace.runtime.store.cache import StorageError, check_writable

    kind = file_kind(out)
    if kind not in (None, "file"):
        raise ProbeError(f"probe.out: {out} {kind}")
    try:
        check_writable(out.parent, "probe.out: the folder")
    except StorageError as exc:
        raise ProbeError(str(exc)) from None


def probe(cfg: ProbeRunConfig, ask: Callable[[str], str] = input) -> Path | None:
    """Run the probe and write the model file; None when the user declined. Raises ProbeError."""
    from wildtrace.app import CONF_DIR
    from wildtrace.runtime.run.plan import model_spec
    from wildtrace.runtime.run.execute import key_needs
    from wildtrace.runtime.net.secrets import read_keys

    p = cfg.probe
    out = Path(p.out) if p.out else Path(CONF_DIR) / "model" / f"{cfg.model.name}.yaml"
    _check_out(out)  # before any request: a directory there failed only after the probe had paid
    if out.exists() and not p.overwrite:
        raise ProbeInputError(f"{out} exists; choose probe.out=… or probe.overwrite=true")
    spec = model_spec(cfg)  # the key is read before the question: a missing key fails first
    keys = read_keys(key_needs([spec]))
    key = keys.get(spec.api_key_env or "")
    if not _confirm(p, *plan_cost(p), ask=ask):
        print("probe: nothing sent.")
        return None
    found, budget = [], p.max_requests
    for language in p.languages:
        s = asyncio.run(search(language, p.min_chars, _max_chars(p, language), p.resolution, budget,
                               _fits_via_harness(cfg, key, language)))
        budget -= len(s.tried)
        found.append(s)
    caps = {s.language: cap_of(s, p) for s in found}
    date = datetime.datetime.now(datetime.UTC).date().isoformat()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(model_yaml(cfg, caps, found, date), encoding="utf-8")
    print(f"probe: caps en={caps.get('en', '—')} cjk={caps.get('cjk', '—')} characters "
          f"({sum(len(s.tried) for s in found)} requests) → {out}")
    return out


register()
ConfigStore.instance().store(name="probe_schema", node=ProbeRunConfig)


def _conf_dir() -> str:
    return str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=_conf_dir(), config_name="probe")
def _job(dict_cfg: DictConfig) -> None:
    from wildtrace.app import route_console_to_stderr
    from wildtrace.runtime.net.secrets import MissingKeyError

    route_console_to_stderr()  # stdout: the probe's own lines; errors and logs: stderr (docs/reference/entry-points.md)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = to_settings(dict_cfg)
        assert isinstance(cfg, ProbeRunConfig)
        # A retired first-party route is refused before any request (docs/providers/routes.md);
        # only the model is probed.
        check_retired(dataclasses.replace(cfg, stage="answer"), Path(_conf_dir()))
        if probe(cfg) is None:
            raise SystemExit(1)
    except (ConfigError, MissingKeyError, ProbeInputError) as exc:
        fail("wildtrace.probe", exc)
    except ProbeError as exc:  # requests were sent and the window could not be told: the probe failed
        fail("wildtrace.probe", exc, ExitCode.RUN_FAILED)


def main() -> None:
    """``python -m wildtrace.probe``."""
    from wildtrace.app import check_command_line

    check_command_line("wildtrace.probe", ProbeRunConfig, Path(_conf_dir()))
    _job()


if __name__ == "__main__":
    main()
