"""The served-model rule: a judge answered by another model than configured is unavailable, not a judgment.

Providers retire a route by re-routing it (Gemini 2.5 Flash → a 3.x Flash-Lite, DeepSeek's
V4 aliases → V4.1 Flash) and gateways map aliases to whatever they serve today; the call
still answers, as a different model, and a rerun comparison would silently compare two
panels. Every response names the model that served it (``CallResult.served_model``), and
each endpoint's ``served_model: {expect, on_mismatch}`` says what it must be:

- ``expect``: a regular expression the served name must match in full (case aside); by
  default the route itself, with an optional provider path (``models/``, ``moonshotai/``),
  gateway prefix (``mr.``) and release suffix (``-2025-04-14``, ``-20260217``, ``-260217``,
  ``-0115``, ``-001``); a route that carries a date accepts that date only. A streamed reply's
  chunks each name a model: every name is checked (a blank after a named one included), and
  a name past ``MAX_SERVED_CHARS`` is refused.
- ``on_mismatch``: ``fail`` (a judge's default) turns the call into a failure with reason
  ``served_model_mismatch`` (the served name is the record's ``served_model``); ``warn`` (the
  model's default) keeps it and the run warns.

The rule is applied where the outcome is recorded, on every read: a mismatched response
stays in the cache (it was paid for, and is evidence) but is refused each time it is read
under ``fail``, so relaxing the rule later re-reads it without paying again, and
``judge_panel.replicate=N`` asks the endpoint afresh. A response that names no model
cannot be checked and passes (recorded with ``served_model: null``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from wildtrace.config import ON_MISMATCH, ConfigError
from wildtrace.core.records import CallResult, FailReason
from wildtrace.providers.registry import provider_class

if TYPE_CHECKING:
    from wildtrace.config import EndpointConfig, WildtraceConfig

#: The reason a refused call carries, and the code of the run's warning about it.
MISMATCH = FailReason.SERVED_MODEL_MISMATCH
#: A served name longer than this is refused, never cut and matched (it is shown cut to this length).
MAX_SERVED_CHARS = 200
_MONTH = r"(?:0[1-9]|1[0-2])"
_DAY = r"(?:0[1-9]|[12]\d|3[01])"
#: A release suffix on a route or a served name, as providers date their snapshots: -2026-02-17,
#: -20260217 (also @ or _), -260217 (YYMMDD), -0115 (MMDD, Qwen's), -09-2025, and -001-style
#: versions (Gemini's); anything else (-999, -999999) is not a release.
_DATE = (rf"(?:-20\d{{2}}-{_MONTH}-{_DAY}|[-@_]20\d{{2}}{_MONTH}{_DAY}|-\d{{2}}{_MONTH}{_DAY}|-{_MONTH}{_DAY}"
         rf"|-{_MONTH}-20\d{{2}}|-0(?:0[1-9]|[1-9]\d))")
_DATED = re.compile(_DATE + r"$")
#: A gateway's short route prefix such as the paper's ``mr.`` (as config_check reads routes).
_GATEWAY_PREFIX = re.compile(r"^[a-z]{1,8}\.(?=[a-z])")


@dataclass(frozen=True)
class ServedPolicy:
    """One endpoint's rule: the pattern the served model must match, and what a mismatch does."""

    expect: str  #: a regular expression, matched in full, case-insensitive
    on_mismatch: str  #: "warn" or "fail"
    derived: bool = True  #: the pattern was derived from the route (not configured)
    route: str = ""  #: the route it was derived from (for messages)

    def expected(self) -> str:
        """What the rule accepts, in words: the route, or the configured pattern."""
        if self.derived and self.route:
            return f"route {self.route!r} (a release suffix or provider path aside)"
        return f"served_model.expect {self.expect!r}"

    def matches(self, served: str) -> bool:
        """Whether ``served`` is the configured model."""
        if len(served) > MAX_SERVED_CHARS:
            return False
        return re.fullmatch(self.expect, served, re.IGNORECASE) is not None


def default_pattern(route: str) -> str:
    """The route as a pattern: optional provider path and gateway prefix, the route, its own date or any date."""
    bare = route.strip().lower().rsplit("/", 1)[-1]
    bare = _GATEWAY_PREFIX.sub("", bare)
    dated = _DATED.search(bare)
    if dated:
        base, suffix = bare[:dated.start()], f"(?:{re.escape(dated.group())})?"
    else:
        base, suffix = bare, f"{_DATE}?"
    return rf"(?:[^/\s]+/)*(?:[a-z]{{1,8}}\.)?{re.escape(base)}{suffix}"


def policy_of(key: str, endpoint: EndpointConfig, judge: bool) -> ServedPolicy:
    """The endpoint's rule from its config (``key`` names it in errors): a judge fails by default, the model warns."""
    rule = endpoint.served_model
    on_mismatch = rule.on_mismatch or ("fail" if judge else "warn")
    if on_mismatch not in ON_MISMATCH:
        raise ConfigError(f"{key}.served_model.on_mismatch must be one of {', '.join(ON_MISMATCH)}, "
                          f"got {rule.on_mismatch!r}")
    if rule.expect is None:
        return ServedPolicy(default_pattern(endpoint.route), on_mismatch, route=endpoint.route)
    if not rule.expect.strip():
        raise ConfigError(f"{key}.served_model.expect is empty: give a regular expression, or null for the route")
    try:
        re.compile(rule.expect)
    except re.error as exc:
        raise ConfigError(f"{key}.served_model.expect is not a regular expression ({exc}): {rule.expect!r}") from None
    return ServedPolicy(rule.expect, on_mismatch, derived=False, route=endpoint.route)


def policies(cfg: WildtraceConfig) -> dict[str, ServedPolicy]:
    """Every endpoint's rule by label ("model", judge keys); offline endpoints have none (nothing can re-route them)."""
    out = {}
    if not provider_class(cfg.model.provider).local:
        out["model"] = policy_of("model", cfg.model, judge=False)
    for key, judge in cfg.judge_panel.judges.items():
        if not provider_class(judge.provider).local:
            out[key] = policy_of(f"judge_panel.judges.{key}", judge, judge=True)
    return out


def enforce(policy: ServedPolicy | None, result: CallResult) -> CallResult:
    """The outcome under the rule: unchanged when it matches (or names no model); else refused or noted."""
    served = result.served_model
    if policy is None or not served or policy.matches(served):
        return result
    shown = served[:MAX_SERVED_CHARS]
    why = f"served by {shown!r}, not the {policy.expected()}"
    if policy.on_mismatch == "warn":
        return replace(result, notes=(*result.notes, f"{MISMATCH} (warned): {why}"))
    if not result.ok and result.reason != FailReason.EMPTY_OUTPUT and result.reason != FailReason.REFUSAL:
        return result  # already a failure for its own reason
    return replace(result, ok=False, reason=MISMATCH,
                   error=f"{why}: the reply is not used (served_model.on_mismatch=fail)")


def mismatches(policy: ServedPolicy | None, served_models: dict[str, int]) -> dict[str, int]:
    """The served names (with their call counts) that break the rule."""
    if policy is None:
        return {}
    return {name: n for name, n in served_models.items() if not policy.matches(name)}


def warnings(rules: dict[str, ServedPolicy], served: dict[str, dict[str, int]],
             routes: dict[str, str]) -> list[tuple[str, str]]:
    """(code, message) per endpoint whose responses broke its rule: ``served_model`` (warned) or
    ``served_model_mismatch``."""
    out: list[tuple[str, str]] = []
    for label, counts in served.items():
        policy = rules.get(label)
        for name, n in sorted(mismatches(policy, counts).items()):
            assert policy is not None
            if policy.on_mismatch == "fail":
                out.append((MISMATCH, (f"{label}: {n} response(s) name {name!r}, not the {policy.expected()}: "
                                       "those replies are not used (served_model.on_mismatch=fail)")))
            else:
                out.append(("served_model", f"{label}: asked for route {routes[label]!r}, the responses name {name!r}"))
    return out
