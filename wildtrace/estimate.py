"""``python -m wildtrace.estimate [overrides]``: what a run would cost, before it sends anything.

Takes the same overrides as a run and plans it exactly as the run does (``run.plan_run``:
caps, out-of-context tasks, cache hits, replicates, stage), then prices every call still
to send (docs/providers/cost.md):

- input tokens from the prompt's characters as a range: low, 4 characters a token for English
  documents and 2 for CJK ones (the most the providers' own descriptions of their tokenizers give);
  high, 3.3 and 1.5 (the spec's ratios, the same the rate pacing uses);
- output tokens as a range: a typical reply (``estimate.answer_tokens``,
  ``estimate.judge_tokens``) up to the completion budget (``max_tokens``);
- a judge call of an answer not known yet holds that answer in its prompt: low, a typical
  answer; high, a full ``max_tokens`` one;
- a call whose input crosses the endpoint's long-context tier is priced at the tier;
- an answer whose prompt the sweep sends again (``prompt_repeats`` N above 1) may be read from the
  provider's prompt cache: low, the first of the N calls at the write price (Anthropic's, for the
  lifetime the schedule marks; the input price where a write costs nothing extra) and the N - 1
  repeats at the cached price, each job bearing 1/N of it; high, all of it missed, or written at the
  dearest write where a write costs more.

Prints one row per endpoint and the total, and writes ``estimate.json`` in its output
folder. No key is read and no request is sent. Exit 2 on a config or data error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from wildtrace.app import CONF_DIR, check_command_line, prepare, route_console_to_stderr
from wildtrace.exitcodes import fail
from wildtrace.config import ConfigError, WildtraceConfig, batch_labels, price_of, register
from wildtrace.core.caps import CHARS_PER_TOKEN, CHARS_PER_TOKEN_MOST, fewest_tokens_of, tokens_of
from wildtrace.core.cost import Billable, Price, exact_cost, in_tier, worst_cost
from wildtrace.runtime.run.pipeline import PlannedCall
from wildtrace.runtime.run.prompt_cache import RepeatSchedule

register()

def _usd(price: Price | None, input_tokens: int, output_tokens: int, batched: bool = False) -> Fraction | None:
    return exact_cost(price, Billable(input_tokens, 0, output_tokens), batched)


def _worst_usd(price: Price | None, input_tokens: int, output_tokens: int, batched: bool = False) -> Fraction | None:
    return worst_cost(price, Billable(input_tokens, 0, output_tokens), batched)


def _first_call(price: Price, schedule: RepeatSchedule, input_tokens: int, output_tokens: int) -> Billable:
    """A prompt's first call: written for the lifetime the schedule marks where the price has a write price
    for it (Anthropic), else missed (where a write costs nothing extra: OpenAI, Gemini)."""
    ttl = schedule.ttl()
    per_mtok = {"5m": price.cache_write_per_mtok, "1h": price.cache_write_1h_per_mtok}.get(ttl or "")
    written = input_tokens if per_mtok is not None else 0
    return Billable(input_tokens, 0, output_tokens, written, written if ttl == "1h" else 0)


def _low_usd(price: Price | None, schedule: RepeatSchedule, input_tokens: int, output_tokens: int,
             batched: bool) -> tuple[Fraction | None, Fraction]:
    """The low end of a call and the input tokens it is expected to read from the provider's cache. Its
    prompt is sent ``schedule.repeats`` (N) times in all, by this job and the sweep's others: the call
    bears 1/N of the first call (written or missed) and of the N - 1 repeats (read)."""
    n = schedule.repeats
    if n <= 1 or price is None or price.cached_input_per_mtok is None:
        return _usd(price, input_tokens, output_tokens, batched), Fraction(0)
    reads = Fraction(input_tokens * (n - 1), n)
    first = exact_cost(price, _first_call(price, schedule, input_tokens, output_tokens), batched)
    repeat = exact_cost(price, Billable(input_tokens, input_tokens, output_tokens), batched)
    if first is None or repeat is None:
        return None, reads
    return (first + (n - 1) * repeat) / n, reads


def _outward(usd: Fraction | None, up: bool) -> float | None:
    """A range end in whole millionths of a dollar, rounded away from the range's inside (the low end down,
    the high end up), so rounding never moves a bill out of it."""
    if usd is None:
        return None
    micros = usd * 10**6
    return (math.ceil(micros) if up else math.floor(micros)) / 10**6


def price_calls(calls: Iterable[PlannedCall], prices: Mapping[str, Price | None], typical: Mapping[str, int],
                answer_max_tokens: int, batched: frozenset[str] = frozenset(),
                repeats: Mapping[str, RepeatSchedule] | None = None) -> dict:
    """estimate.json from the planned calls: per endpoint and the total (USD None where a price is missing).

    ``typical``: label → a typical reply's output tokens; ``answer_max_tokens``: the answers'
    budget, the longest answer a pending judge call may hold; ``batched``: the endpoints sent
    through a batch API, priced with their ``batch_discount`` (unknown where it has none);
    ``repeats``: label → how often the command's schedule sends each of its prompts, and for what lifetime
    (low: the first call written or missed, the repeats read from the provider's cache; none: one call).
    """
    rows: dict[str, dict] = {label: {"calls": 0, "input_tokens": 0, "input_tokens_max": 0, "output_tokens_min": 0,
                                     "output_tokens_max": 0, "tier_calls": 0, "cache_read_tokens": 0}
                             for label in prices}
    answer_typical = typical.get("model", 0)
    schedules = repeats or {}
    reads: dict[str, Fraction] = {label: Fraction(0) for label in prices}
    sums: dict[str, dict[str, Fraction | None]] = {label: {"usd_min": Fraction(0), "usd_max": Fraction(0)}
                                                   for label in prices}
    for call in calls:
        row, price = rows[call.label], prices[call.label]
        low_in, high_in = fewest_tokens_of(call.prompt_chars, call.cjk), tokens_of(call.prompt_chars, call.cjk)
        spec_in = high_in  # the spec's count: what the tier column and the pacing go by
        if call.answer_pending:
            low_in, high_in, spec_in = low_in + answer_typical, high_in + answer_max_tokens, spec_in + answer_typical
        low_out = min(typical.get(call.label, 0), call.max_tokens)
        row["calls"] += 1
        row["input_tokens"] += low_in
        row["input_tokens_max"] += high_in
        row["output_tokens_min"] += low_out
        row["output_tokens_max"] += call.max_tokens
        row["tier_calls"] += int(price is not None and in_tier(price, spec_in))
        b = call.label in batched
        schedule = schedules.get(call.label, RepeatSchedule())
        low, read = _low_usd(price, schedule, low_in, low_out, b)
        reads[call.label] += read
        for key, usd in (("usd_min", low),
                         ("usd_max", _worst_usd(price, high_in, call.max_tokens, b) if schedule.repeats > 1
                          else _usd(price, high_in, call.max_tokens, b))):
            so_far = sums[call.label][key]
            sums[call.label][key] = None if usd is None or so_far is None else so_far + usd
    for label, row in rows.items():
        row["cache_read_tokens"] = round(reads[label])
        row["usd_min"], row["usd_max"] = (_outward(sums[label][k], k == "usd_max") for k in ("usd_min", "usd_max"))
    total = {key: (None if any(r[key] is None for r in rows.values()) else round(sum(r[key] for r in rows.values()), 6))
             for key in ("usd_min", "usd_max")}
    for key in ("usd_min", "usd_max"):  # what the priced endpoints alone come to, when some have no price
        total[f"priced_{key}"] = round(sum(r[key] for r in rows.values() if r[key] is not None), 6)
    return {"endpoints": rows, "total": total}


def estimate(cfg: WildtraceConfig) -> dict:
    """Plan the run as ``run`` would and price what it still has to send."""
    from wildtrace.runtime.run.execute import endpoint_configs, plan_run

    plan, survey = plan_run(cfg)
    specs, configs, answer = plan.specs, endpoint_configs(cfg), plan.answer_sampling
    prices = {s.label: price_of(configs[s.label]) for s in specs}
    typical = {s.label: cfg.estimate.answer_tokens if s.label == "model" else cfg.estimate.judge_tokens for s in specs}
    out = price_calls(survey.planned, prices, typical, answer.max_tokens, batch_labels(cfg), {"model": plan.repeats})
    out["missing_prices"] = {s.label: f"{'model' if s.label == 'model' else 'judge_panel.judges.' + s.label}.price."
                             + prices[s.label].missing()[0] for s in specs if prices[s.label].missing()}
    out["plan"] = {"answers_to_request": survey.answers_to_request, "answers_cached": survey.answers_cached,
                   "out_of_context": survey.out_of_context, "judge_calls_cached": survey.judge_calls_cached,
                   "judge_calls_pending_answers": survey.judge_calls_pending}
    out["assumptions"] = {"chars_per_token": CHARS_PER_TOKEN, "chars_per_token_low": CHARS_PER_TOKEN_MOST,
                          "typical_output_tokens": typical}
    return out


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def render(est: dict) -> str:
    """The estimate as an aligned table and a total line."""
    header = ("endpoint", "calls", "input tokens", "cache reads", "output tokens", "tier calls", "USD low",
              "USD high")
    rows = [header]
    for label, r in est["endpoints"].items():
        wider = r["input_tokens_max"] != r["input_tokens"]
        inputs = f"{r['input_tokens']:,}" + (f"–{r['input_tokens_max']:,}" if wider else "")
        reads = f"0–{r['cache_read_tokens']:,}" if r["cache_read_tokens"] else "0"
        rows.append((label, f"{r['calls']:,}", inputs, reads, f"{r['output_tokens_min']:,}–{r['output_tokens_max']:,}",
                     f"{r['tier_calls']:,}", _money(r["usd_min"]), _money(r["usd_max"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.append(total_line(est))
    lines.extend(f"price unknown: {label} has no {key} (the total stays unknown until it is set)"
                 for label, key in est.get("missing_prices", {}).items())
    return "\n".join(lines)


def total_line(est: dict) -> str:
    """One line: the run's estimated cost, low to high."""
    t = est["total"]
    calls = sum(r["calls"] for r in est["endpoints"].values())
    text = (f"estimate: {_money(t['usd_min'])} – {_money(t['usd_max'])} for the calls still to send "
            f"({calls:,} calls; nothing sent)")
    if t["usd_min"] is None:
        text += f"; the priced endpoints alone: {_money(t['priced_usd_min'])} – {_money(t['priced_usd_max'])}"
    return text


#: Stands in for a base URL nobody set: the estimate sends nothing, so it needs no host (nor key).
UNSET_BASE_URL = "http://base-url-not-set.invalid"


def fill_unset_base_urls(dict_cfg: DictConfig) -> None:
    """An endpoint whose base URL comes from an unset variable still gets priced (a run would refuse it)."""
    nodes = [dict_cfg.model, *dict_cfg.judge_panel.judges.values()]
    for node in nodes:
        if not str(node.get("base_url") or "").strip():
            node.base_url = UNSET_BASE_URL


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="estimate")
def _estimate(dict_cfg: DictConfig) -> None:
    from wildtrace.core.tasks import DatasetError

    route_console_to_stderr()
    hydra_cfg = HydraConfig.get()
    try:
        fill_unset_base_urls(dict_cfg)
        cfg = prepare(dict_cfg, list(hydra_cfg.overrides.task), refuse_retired=False)
        est = estimate(cfg)
    except (ConfigError, DatasetError) as exc:
        fail("wildtrace-estimate", exc)
    out = Path(hydra_cfg.runtime.output_dir) / "estimate.json"
    out.write_text(json.dumps(est, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(render(est))
    print(f"written: {out}")


def main() -> None:
    """Console script and ``python -m wildtrace.estimate``."""
    check_command_line("wildtrace-estimate")
    _estimate()


if __name__ == "__main__":
    main()
