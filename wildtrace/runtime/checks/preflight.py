"""Preflight: one small request per endpoint with the run's real settings, before paying for a run.

Each endpoint (the model and every judge) gets a few-word prompt — no document — through
the same call a run makes (stream, budget field, temperature rule, extra body), with the
cache off and one retry, so a wrong key, a moved route or a rejected setting shows in
seconds instead of as 481 failed tasks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from wildtrace.core.judging import parse_judge_reply
from wildtrace.core.prompts import answer_prompt, judge_prompt
from wildtrace.core.records import FailReason
from wildtrace.core.tasks import RubricItem
from wildtrace.providers.base import EndpointSpec, Sampling
from wildtrace.providers.registry import provider_class
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.checks.catalog import RouteStatus, list_models, route_status
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.run.plan import make_endpoint
from wildtrace.runtime.net.retry import RetryPolicy
from wildtrace.runtime.net.served import MISMATCH, ServedPolicy, enforce

#: The preflight prompts are the spec's own, over a one-line note instead of a corpus document.
QUESTION = "What colour was the door?"
NOTE = "Maintenance note: the door was painted green on Monday."
RUBRIC = [RubricItem(points=100, criterion="says the door was green")]
ANSWER = "The door was green."


def prompt_for(spec: EndpointSpec) -> str:
    """A model gets the answer prompt, a judge the judge prompt: tiny, and exactly as a run builds them."""
    return answer_prompt(QUESTION, NOTE) if spec.label == "model" else judge_prompt(QUESTION, RUBRIC, ANSWER)


class CheckStatus(StrEnum):
    """A check that did not fail for a call's own reason (a ``FailReason`` says why one did)."""

    OK = "ok"  # the endpoint answered
    NOT_SENT = "not_sent"  # the endpoint's model list lacks the route: no paid call


@dataclass(frozen=True)
class Check:
    """One endpoint's preflight result, a row of the printed table."""

    endpoint: str  #: "model" or the judge key
    route: str  #: the route asked for
    served_model: str | None  #: the model the response says answered
    ok: bool  #: the endpoint answered (an empty reply or a refusal still proves key, route and settings)
    status: CheckStatus | FailReason
    http_status: int | None  #: the last HTTP status seen
    latency_s: float  #: wall time of the call, retries included
    temperature: str  #: "accepted", "rejected (omitted)", or "not sent"
    message: str  #: the provider's message on failure, or the reply's first words
    listing: str = "-"  #: what the endpoint's model list says of the route (runtime/checks/catalog.py)


def _temperature(spec: EndpointSpec, sampling: Sampling, sent: bool | str | None) -> str:
    if not spec.send_temperature or sampling.temperature is None:
        return "not sent"
    if sent == "ignored":
        return "ignored (documented)"
    return "accepted" if sent else "rejected (omitted)"


async def _one(spec: EndpointSpec, key: str | None, sampling: Sampling, retry: RetryPolicy,
               rule: ServedPolicy | None = None, listed: RouteStatus | None = None) -> Check:
    if listed is not None and listed.blocks:  # the list says the route is not there: no paid call
        return Check(endpoint=spec.label, route=spec.route, served_model=None, ok=False, status=CheckStatus.NOT_SENT,
                     http_status=None, latency_s=0.0, temperature="not sent",
                     message=f"not sent: the endpoint's model list: {listed.text}", listing=listed.text)
    endpoint = make_endpoint(make_provider(spec), key, retry, Cache(Path(), enabled=False), lambda label: None)
    try:
        result = enforce(rule, await endpoint.call(endpoint.provider.build_request(prompt_for(spec), sampling)))
    finally:
        await endpoint.aclose()
    answered = result.ok or result.reason in (FailReason.EMPTY_OUTPUT, FailReason.REFUSAL)
    message = (result.text or "").strip()[:60] if result.ok else (result.error or result.reason or "")
    if result.ok and spec.label != "model":
        verdict = parse_judge_reply(result.text)
        message = f"total={verdict.total:g}" if verdict.available and verdict.total is not None else \
            f"reply has no usable total ({verdict.reason}): {message}"
    status = CheckStatus.OK if result.ok or result.reason is None else result.reason
    if status == MISMATCH:
        message = result.error or message
    return Check(endpoint=spec.label, route=spec.route, served_model=result.served_model, ok=answered,
                 status=status, http_status=result.http_status, latency_s=round(result.latency_s, 3),
                 temperature=_temperature(spec, sampling, result.temperature_sent),
                 message=message, listing=listed.text if listed is not None else "-")


async def model_lists(endpoints: list[tuple[EndpointSpec, str | None]]) -> list[RouteStatus]:
    """What each endpoint's own model list says of its route (free GETs, before any paid call); in order."""
    async def one(spec: EndpointSpec, key: str | None) -> RouteStatus:
        if provider_class(spec.provider).local:
            return route_status(spec, None)
        return route_status(spec, await list_models(spec, key))

    return list(await asyncio.gather(*(one(spec, key) for spec, key in endpoints)))


async def preflight(endpoints: list[tuple[EndpointSpec, str | None, Sampling]], retry: RetryPolicy,
                    rules: dict[str, ServedPolicy] | None = None,
                    listed: list[RouteStatus] | None = None) -> list[Check]:
    """Check every (spec, key, sampling) at once; results in the given order.

    ``rules``: each label's served-model rule (a mismatch under ``fail`` fails the check);
    ``listed``: ``model_lists``' answers, in the same order (a route they lack is not called).
    """
    rules = rules or {}
    status: list[RouteStatus | None] = list(listed) if listed else [None] * len(endpoints)
    return list(await asyncio.gather(*(_one(spec, key, sampling, retry, rules.get(spec.label), st)
                                       for (spec, key, sampling), st in zip(endpoints, status, strict=False))))


def listing_lines(specs: list[EndpointSpec], listed: list[RouteStatus]) -> list[str]:
    """One line per endpoint asked: what its model list says of its route."""
    return [f"model list: {spec.label}: {spec.route}: {st.text}" for spec, st in zip(specs, listed, strict=False)
            if st.text != "-"]


def table(checks: list[Check]) -> str:
    """The checks as an aligned text table."""
    header = ("endpoint", "route", "served by", "status", "http", "latency", "temperature", "message")
    rows = [header] + [(c.endpoint, c.route, c.served_model or "-", c.status, str(c.http_status or "-"),
                        f"{c.latency_s:.2f}s", c.temperature, c.message.replace("\n", " ")[:100]) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
