"""The report on disk: CSV and Markdown tables, JSON, PNG plots and one self-contained HTML page.

The page inlines every plot as a base64 data URI and carries its own few CSS lines: it
fetches nothing, so it opens the same offline, attached to an e-mail or from MLflow.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: plots are files

import matplotlib.pyplot as plt
import pandas as pd

from wildtrace.report.statistics.noise import interpretation
from wildtrace.report.assemble import Report
from wildtrace.report.family import HOW_TO, shown

#: Section ids of report.html, in page order, with their headings.
SECTIONS = {
    "leaderboard": "Leaderboard at the baseline setting",
    "sweeps": "Sweeps: one setting varied",
    "ablations": "Judge-panel ablations",
    "reruns": "Reruns: how far the same setting moves",
    "judge-agreement": "Judge agreement",
    "judge-family": "Judge family check",
    "judge-splits": "Where the judges split",
    "paradigms-tiers": "Languages, paradigms and context tiers",
    "points": "Every point read",
    "matched-panel": "Matched panel (robustness check, not the headline)",
    "provenance": "Provenance",
}


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 0.1 or value == 0 else f"{value:.4f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table (floats to 2 decimals, missing as —)."""
    if frame.empty:
        return "_(none)_\n"
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def _pct(value: Any) -> Any:
    return None if value is None else 100.0 * value


def agreement_frames(agreement: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """judge_agreement.json as two tables, in % and percentage points (the JSON keeps 0–1): per
    judge (with its unavailable calls split into parse and call failures), per pair."""
    judges = pd.DataFrame([{"judge": k, "mean_pct": _pct(v["mean"]), "bias_vs_panel_pp": _pct(v.get("bias")),
                            "n_graded": v["n"], "n_unavailable": v.get("n_unavailable"),
                            "n_parse_failures": v.get("n_parse_failures"), "n_call_failures": v.get("n_call_failures"),
                            "unavailable_pct": _pct(v["unavailable_rate"])} for k, v in agreement["judges"].items()])
    pairs = pd.DataFrame([{"pair": k, "pearson": v["pearson"], "spearman": v["spearman"],
                           "mean_abs_diff_pp": _pct(v["mad"]), "n_both": v["n"]}
                          for k, v in agreement["pairs"].items()])
    return judges, pairs


def intra_rater_frame(agreement: dict) -> pd.DataFrame:
    """Each judge against itself, in % and percentage points, with Krippendorff's reading of alpha."""
    items = agreement.get("intra_rater_items", {})
    return pd.DataFrame([{"judge": k, "alpha_interval": v["krippendorff_alpha_interval"],
                          "alpha_ci_low": v["alpha_ci_low"], "alpha_ci_high": v["alpha_ci_high"],
                          "reading": v["reading"], "n_units": v["n_units"],
                          "n_replicates": v["n_replicates"], "changed_pct": _pct(v["changed_rate"]),
                          "mean_abs_change_pp": _pct(v["mean_abs_change"]),
                          "max_abs_change_pp": _pct(v["max_abs_change"]),
                          "item_flip_pct": _pct(items.get(k, {}).get("flip_rate"))}
                         for k, v in agreement.get("intra_rater", {}).items()])


def noise_frame(rows: list[dict]) -> pd.DataFrame:
    """noise.json as a table: each replicated row's variance components (pp²) with intervals,
    negative estimates flagged, and the sd (pp) of the row's score they imply."""
    out = []
    for r in rows:
        row: dict[str, Any] = {"model": r["model"], "n_runs": r["n_runs"],
                               "n_distinct_answers": r["n_distinct_answers"],
                               "n_distinct_gradings": r["n_distinct_gradings"]}
        for source in ("tasks", "answers", "judges"):
            lo, hi = r["ci_pp2"][source]
            row.update({f"var_{source}_pp2": r["var_pp2"][source], f"var_{source}_ci_low_pp2": lo,
                        f"var_{source}_ci_high_pp2": hi})
        row["negative_estimate"] = ", ".join(r["negative"])
        row["row_sd_pp"] = r["row_sd_pp"]
        row["not_estimable"] = "; ".join(f"{k}: {v}" for k, v in r.get("not_estimable", {}).items())
        out.append(row)
    return pd.DataFrame(out)


#: Column → the words the page heads it with (the CSVs keep the short names).
WORDS = {
    "judge": "judge", "mean_pct": "mean score (%)", "bias_vs_panel_pp": "bias vs panel mean (pp)",
    "n_graded": "graded (n)", "n_unavailable": "unavailable (n)", "n_parse_failures": "parse failures (n)",
    "n_call_failures": "call failures (n)", "unavailable_pct": "unavailable (% of calls)",
    "pearson": "Pearson r", "spearman": "Spearman ρ", "mean_abs_diff_pp": "mean absolute difference (pp)",
    "n_both": "tasks both graded (n)", "alpha_interval": "Krippendorff's alpha (interval) across replicates",
    "reading": "reading", "n_units": "answers graded ≥ 2 times (n)", "n_replicates": "replicates (n)",
    "changed_pct": "score changed (% of answers)", "mean_abs_change_pp": "mean change (pp)",
    "max_abs_change_pp": "largest change (pp)", "item_flip_pct": "rubric items flipped (%)",
    "sd_tasks_pp": "sd from tasks (pp)", "sd_answers_pp": "sd from answers (pp)", "sd_judges_pp": "sd from judges (pp)",
    "n_answer_replicates": "answer sets (n)", "n_judge_replicates": "gradings of an answer set (n)",
    "not_estimable": "not estimable, why", "question_id": "task", "item": "rubric item", "criterion": "criterion",
    "n_answers": "answers (n)", "flip_pct": "points flipped (% of answers)",
    "split_pct": "judges differ (% of answers)",
    "mean_spread": "mean spread of points", "rank": "rank", "upper": "upper row", "lower": "lower row",
    "gap_pp": "gap (pp)", "ci_low_pp": "95% CI low (pp)", "ci_high_pp": "95% CI high (pp)",
    "n_tasks": "tasks (n)", "within_noise": "within noise", "noise": "against noise",
    "judge_drift": "judges differ in", "noise_ci_low_pp": "CI low with replicates (pp)",
    "noise_ci_high_pp": "CI high with replicates (pp)", "diff_pp": "diff b − a (pp)",
    "overall_a": "overall a (%)", "overall_b": "overall b (%)", "value_a": "value a", "value_b": "value b",
    "setting": "setting", "n_runs": "runs (n)", "n_scored": "scored tasks (n)",
    "n_out_of_context": "out of context (n)", "n_failed": "failed (n)", "matched": "matched (%)", "n": "tasks (n)",
    "all": "All view (%)", "scored": "Scored view (%)", "replicate": "replicate of",
    "overall_mean": "overall mean (%)", "overall_sd": "sd across runs (pp)", "overall_min": "lowest (%)",
    "overall_max": "highest (%)", "overall_range": "range (pp)", "task_sd_mean_pp": "mean per-task sd (pp)",
    "task_range_max_pp": "largest per-task range (pp)",
}


# --------------------------------------------------------------------------- plots


def _png(fig: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def plot_leaderboard(board: pd.DataFrame) -> bytes:
    """The baseline leaderboard: each model's All-view score with its 95% interval as whiskers."""
    fig, ax = plt.subplots(figsize=(8, 0.5 * max(len(board), 2) + 1.2))
    values = board["overall_pct"].astype(float)
    err = [values - board["ci_low_pct"].astype(float), board["ci_high_pct"].astype(float) - values]
    ax.errorbar(values, range(len(board)), xerr=err, fmt="o", capsize=4, color="tab:blue")
    ax.set_yticks(list(range(len(board))), board["model"])
    ax.invert_yaxis()
    ax.set_xlabel("All view (%) with its 95% interval over tasks")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def plot_sweep(part: pd.DataFrame) -> bytes:
    """A sweep: each model's score (%) over the swept value, with its 95% interval."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in part["value"])
    for model, rows in part.groupby("model", sort=True):
        x = rows["value"].astype(float) if numeric else rows["value"].astype(str)
        y = rows["overall_pct"].astype(float)
        err = [y - rows["ci_low_pct"].astype(float), rows["ci_high_pct"].astype(float) - y]
        ax.errorbar(x, y, yerr=err, fmt="o-", capsize=4, label=str(model))
    key = str(part["key"].iloc[0])
    if numeric and key.endswith("max_tokens"):
        ax.set_xscale("log", base=2)
    ax.set_xlabel(key)
    ax.set_ylabel("All view (%), 95% interval")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_tiers(tiers: pd.DataFrame) -> bytes:
    """All-view score per context tier, a line per row."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for model, part in tiers.groupby("model", sort=False):
        ax.plot(part["context_tier"].astype(str), part["all"].astype(float), marker="o", label=str(model))
    ax.set_ylabel("All view (%)")
    ax.set_xlabel("context tier")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines, not on them
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_agreement(agreement: dict) -> bytes:
    """Pairwise Pearson r between judges (pooled units) as a heatmap."""
    judges = sorted(agreement["judges"])
    matrix = pd.DataFrame(1.0, index=judges, columns=judges)
    for key, row in agreement["pairs"].items():
        a, b = key.split("~")
        value = row["pearson"] if row["pearson"] is not None else float("nan")
        matrix.loc[a, b] = matrix.loc[b, a] = value
    fig, ax = plt.subplots(figsize=(1.2 * len(judges) + 2.5, 1.0 * len(judges) + 1.5))
    image = ax.imshow(matrix.to_numpy(dtype=float), vmin=-1, vmax=1, cmap="RdBu")
    ax.set_xticks(range(len(judges)), judges, rotation=30, ha="right")
    ax.set_yticks(range(len(judges)), judges)
    for i in range(len(judges)):
        for j in range(len(judges)):
            v = matrix.iat[i, j]
            ax.text(j, i, "—" if v != v else f"{v:.2f}", ha="center", va="center")
    fig.colorbar(image, ax=ax, label="Pearson r")
    alpha = agreement.get("krippendorff_alpha_interval")
    ax.set_title(f"Krippendorff's alpha (interval) = {'—' if alpha is None else f'{alpha:.3f}'}")
    return _png(fig)


def plot_noise(rows: list[dict]) -> bytes:
    """Per replicated row: the share of its overall's variance from tasks, answers and judges
    (stacked to 100 %), each bar labelled with the sds in pp."""
    fig, ax = plt.subplots(figsize=(8, 0.55 * max(len(rows), 2) + 1.4))
    colours = {"tasks": "tab:grey", "answers": "tab:orange", "judges": "tab:blue"}
    for i, row in enumerate(rows):
        sd = row["sd_pp"]
        var = {k: (v or 0.0) ** 2 for k, v in sd.items()}
        total = sum(var.values()) or 1.0
        left = 0.0
        for source, colour in colours.items():
            share = 100.0 * var[source] / total
            ax.barh(i, share, left=left, color=colour, label=source if i == 0 else None)
            left += share
        text = " · ".join(f"{k} {'n/a' if v is None else f'{v:.2f}'}" for k, v in sd.items())
        ax.annotate(f"sd pp: {text}", (100, i), xytext=(6, -3), textcoords="offset points", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["model"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the overall's variance (%): tasks, answers (decoding replicates), "
                  "judges (judge replicates)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3)
    return _png(fig)


def plots(report: Report) -> dict[str, bytes]:
    """name → PNG bytes for the plots the report has data for."""
    out = {}
    if len(report.baseline):
        out["leaderboard.png"] = plot_leaderboard(report.baseline)
    for name, part in report.sweeps.groupby("experiment", sort=False) if len(report.sweeps) else []:
        out[f"sweep_{_anchor(str(name))}.png"] = plot_sweep(part)
    if len(report.tiers):
        out["tiers.png"] = plot_tiers(report.tiers)
    if report.agreement["judges"]:
        out["judge_agreement.png"] = plot_agreement(report.agreement)
    if report.noise:
        out["noise.png"] = plot_noise(report.noise)
    return out


# --------------------------------------------------------------------------- files


def experiment_tables(report: Report) -> dict[str, pd.DataFrame]:
    """sweeps, ablations, reruns: a row per model × experiment × value, units in the column names
    (what is written beside report.html, and what the report's MLflow run logs)."""
    return {"sweeps": rounded(report.sweeps), "ablations": rounded(report.ablations),
            "reruns": rounded(report.reruns)}


def tables(report: Report) -> dict[str, pd.DataFrame]:
    """name (without extension) → table, as written to CSV and logged to MLflow (rounded)."""
    judges, pairs = agreement_frames(report.agreement)
    out = {"baseline": report.baseline, **experiment_tables(report), "leaderboard": report.leaderboard,
           "matched_panel": report.matched, "paradigms": report.paradigms, "languages": report.languages,
           "tiers": report.tiers, "judges": judges, "judge_pairs": pairs,
           "intra_rater": intra_rater_frame(report.agreement), "intra_rater_items": report.item_flips,
           "judge_splits": report.splits, "replicates": report.replicates,
           "replicate_tasks": report.replicate_tasks, "noise": noise_frame(report.noise), "gaps": report.gaps,
           "family": report.family, "provenance": report.provenance, "prompt_cache": report.prompt_cache}
    return {name: rounded(frame) for name, frame in out.items()}


#: Digits a CSV keeps: 1 for scores, differences and rubric points (0.1 pp), 4 for the rest (p, r, alpha, tau, rates).
SCORE_DIGITS, OTHER_DIGITS = 1, 4
#: Columns in % or pp whose names predate the unit suffix.
SCORE_COLUMNS = ("overall", "overall_ci_low", "overall_ci_high", "scored", "scored_ci_low", "scored_ci_high",
                 "overall_sd", "overall_min", "overall_max", "overall_mean", "overall_range", "matched", "all")


def rounded(frame: pd.DataFrame) -> pd.DataFrame:
    """No unrounded float in a table: scores and differences (%, pp) to 0.1, the rest to 4 digits."""
    out = frame.copy()
    for column in out.columns:
        values = out[column]
        if not any(isinstance(v, float) for v in values):
            continue
        name = str(column)
        points = name == "mean_spread" or name.startswith("points_")  # rubric points, on the scores' 0–100 scale
        digits = SCORE_DIGITS if name.endswith(("_pct", "_pp")) or name in SCORE_COLUMNS or points else OTHER_DIGITS
        if name.endswith("_pp2") or name.endswith("_usd") or name == "usd_per_point":
            digits = 2 if name.endswith("_pp2") else OTHER_DIGITS
        out[column] = pd.Series([round(v, digits) if isinstance(v, float) and v == v else
                                 (None if isinstance(v, float) else v) for v in values], index=out.index,
                                dtype=object)
    return out


def _method(report: Report) -> str:
    b = report.boot
    n = len(report.duplicates)
    return (f"{report.n_runs_read} runs read, {n} identical duplicate{'' if n == 1 else 's'} counted once. "
            f"Intervals: percentile bootstrap over tasks, {b.resamples} resamples, seed {b.seed}, "
            f"{100 * b.level:g}% level"
            + ("; the baseline scores' intervals resample documents (a document's tasks together), "
               "design_effect their variance over the task bootstrap's" if b.by_document else "")
            + ". Scores in %; differences and spreads in percentage points (pp).")


def leaderboard_md(report: Report) -> str:
    """leaderboard.md: the baseline leaderboard, every point read, then the matched panel (the robustness check)."""
    return ("# WildTrace leaderboard\n\n" + _method(report) + "\n\nOne row per model at the baseline setting "
            "(the spec's decoding, the full panel): `overall_pct` is the All view (every task of the dataset, "
            "failed / out-of-context / unscored / not reached as 0) with its 95% interval (`ci_low_pct`, "
            "`ci_high_pct`); `rank` with its bootstrap interval and `p_rank1_pct`, the share of resamples where "
            "the model ranks first.\n\n" + markdown(tables(report)["baseline"])
            + "\n## Every point read (sweep and ablation points included)\n\n`overall` is the All view; `scored` "
            "the mean over scored tasks; both in %, each with its 95% bootstrap interval (`_ci_low`, `_ci_high`, "
            "%). `n_runs` replicates make a row; `overall_sd` (pp), `overall_min` and `overall_max` (%) are their "
            "spread.\n\n" + markdown(tables(report)["leaderboard"])
            + "\n## Matched panel — robustness check (spec §5), not the headline\n\n" + markdown(report.matched))


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _words(column: Any) -> str:
    name = str(column)
    if name in WORDS:
        return WORDS[name]
    return f"{name[len('points_'):]}: mean points" if name.startswith("points_") else name


def _table(frame: pd.DataFrame, empty: str = "(none)") -> str:
    if frame.empty:
        return f"<p><em>{html.escape(empty)}</em></p>"
    shown = frame.map(_cell) if hasattr(frame, "map") else frame.applymap(_cell)
    shown = shown.rename(columns=_words)
    return shown.to_html(index=False, escape=True, border=0)


# overflow-wrap:anywhere lets provenance's run ids and panel strings wrap, so it fits a 1400 px window.
CSS = ("body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;margin:1em 0;"
       "font-size:13px;max-width:100%}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}"
       "#provenance td{overflow-wrap:anywhere}th{background:#eee}"
       "img{max-width:100%;display:block;margin:1em 0}section{margin-bottom:2.5em}")


def _interval(low: Any, high: Any) -> str:
    return "—" if low is None or high is None or low != low or high != high else f"{low:.2f}–{high:.2f}"


def leaderboard_view(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard for reading: each view with its interval in one column, the spread beside it."""
    if board.empty:
        return board
    view = board[["model", "panel", "release", "run_date"]].copy()
    view["overall: All view (%)"] = board["overall"]
    view["overall 95% CI (%)"] = [_interval(lo, hi) for lo, hi in
                                  zip(board["overall_ci_low"], board["overall_ci_high"], strict=True)]
    view["Scored view (%)"] = board["scored"]
    view["scored 95% CI (%)"] = [_interval(lo, hi) for lo, hi in
                                 zip(board["scored_ci_low"], board["scored_ci_high"], strict=True)]
    view["runs (n)"] = board["n_runs"]
    view["small n (< 30 tasks)"] = board["small_n"]
    view["sd across runs (pp)"] = board["overall_sd"]
    view["range across runs (%)"] = [_interval(lo, hi) if n > 1 else "—" for lo, hi, n in
                                     zip(board["overall_min"], board["overall_max"], board["n_runs"], strict=True)]
    for column in ("n_scored", "n_out_of_context", "n_failed", "n_tasks"):
        view[column] = board[column]
    if "cost_usd" in board:  # USD the outcomes cost, and per point of the All view ("—" when unknown)
        view["cost USD"] = [_usd(v) for v in board["cost_usd"]]
        view["USD / point"] = [_usd(v) for v in board["usd_per_point"]]
    return view


def _usd(value: Any) -> str:
    return "—" if value is None or value != value else f"{value:,.4f}" if value < 1 else f"{value:,.2f}"


def _judge_agreement_html(report: Report, pngs: dict[str, bytes]) -> str:
    """Between judges, then each judge against itself, each with how to read it."""
    agreement = report.agreement
    judges, pairs = agreement_frames(agreement)
    alpha = agreement.get("krippendorff_alpha_interval")
    silent = judges[judges["n_graded"] == 0] if len(judges) else judges
    shown_judges = judges[judges["n_graded"] > 0] if len(judges) else judges
    shown_pairs = pairs[pairs["n_both"] > 0] if len(pairs) else pairs
    notes = "".join(f"<li>{html.escape(str(r.judge))}: no verdict — all {r.n_unavailable} calls unavailable "
                    f"({r.n_parse_failures} parse failures, {r.n_call_failures} call failures)</li>"
                    for r in silent.itertuples(index=False))
    intra = intra_rater_frame(agreement)
    flips = _rates_in_pct(report.item_flips[report.item_flips["flip_rate"] > 0].head(20)) \
        if len(report.item_flips) else report.item_flips
    return (f"<p>Between judges: pooled over {agreement.get('n_runs', 0)} runs, {agreement.get('n_units', 0)} "
            f"(run, task) units. Krippendorff's alpha (interval): <b>{_cell(alpha)}</b>, "
            f"{html.escape(interpretation(alpha))}. Krippendorff's thresholds: ≥ 0.8 reliable, ≥ 0.667 tentative, "
            "below that not to be relied on.</p>"
            "<p>Bias vs panel mean: the judge's score minus the mean of the judges on the same task. Unavailable "
            "calls (a reply with no usable total is a parse failure; no reply at all a call failure) stay in the "
            "denominator of the unavailable share.</p>"
            + _table(shown_judges) + (f"<ul>{notes}</ul>" if notes else "")
            + "<p>Pairs never graded together are not shown.</p>" * bool(len(pairs) - len(shown_pairs))
            + _table(shown_pairs) + _img(pngs.get("judge_agreement.png"), "judge agreement heatmap")
            + "<h3>Each judge against itself (intra-rater)</h3><p>The same answer bytes graded again "
              "(<code>judge_panel.replicate</code>): alpha across a judge's replicates, the share of answers whose "
              "score changed, the mean change between two gradings and the largest, and the share of rubric "
              "items whose points flipped. Read alpha as above (≥ 0.8 reliable, ≥ 0.667 tentative).</p>"
            + _table(intra, "(no judge replicate: run the same answers with judge_panel.replicate=1,2)")
            + ("<h4>Rubric items that flip most between replicates (top 20)</h4>" + _table(flips)
               if len(flips) else ""))


#: Criterion text shown on the page (the CSVs keep it whole).
CRITERION_CHARS = 160


def _rates_in_pct(frame: pd.DataFrame) -> pd.DataFrame:
    """A table for the page: *_rate columns (0–1) as *_pct, long criteria cut."""
    out = frame.copy()
    for column in [c for c in out.columns if c.endswith("_rate")]:
        out[column[:-len("_rate")] + "_pct"] = 100.0 * out.pop(column).astype(float)
    if "criterion" in out:
        out["criterion"] = [c if not isinstance(c, str) or len(c) <= CRITERION_CHARS else c[:CRITERION_CHARS] + "…"
                            for c in out["criterion"]]
    return out


#: Terms the page explains where they first appear.
TERMS = {
    "interval": "95% interval: the range a score or difference would take over 95% of re-draws of the tasks "
                "(below 30 tasks a t interval, or BCa with report.bootstrap.small_n=bca, flagged <em>small n</em>; "
                "else a percentile bootstrap over tasks).",
    "paired": "Paired difference: the mean over tasks of (point − reference) on each task's score averaged over "
              "the point's replicates; its interval and p-value are a paired t-test over tasks. Replicates are "
              "averaged, not resampled again, so judge and answer noise count once, inside the per-task "
              "differences. <em>distinguishable</em>: Holm-adjusted p &lt; 0.05 across the comparisons of one "
              "table.",
    "alpha": "Krippendorff's alpha (interval): agreement on the interval metric, (a − b)² between scores; 1 is "
             "perfect, 0 chance. Read from the lower end of its interval: ≥ 0.8 reliable, ≥ 0.667 tentative.",
    "icc": "ICC(3,k): the reliability of the panel's mean score (a judge's constant offset is not "
           "disagreement there: the headline averages the judges).",
    "variance": "Variance components (pp², per grading of a task): tasks (how much tasks differ), answers "
                "(decoding replicates of one task that came back different), judges (gradings of the same answer "
                "bytes); expected mean squares, each with an interval over tasks; a negative estimate is shown "
                "and flagged, not floored. Identical answers graded once from the cache count once. "
                "row sd (pp): the sd of the point's score they imply.",
}


def _term(name: str) -> str:
    return f'<p class="term">{TERMS[name]}</p>'


def _contents() -> str:
    return "<nav><b>Contents</b><ol>" + "".join(f'<li><a href="#{sid}">{html.escape(title)}</a></li>'
                                                 for sid, title in SECTIONS.items()) + "</ol></nav>"


def _sweeps_html(report: Report, pngs: dict[str, bytes]) -> str:
    if report.sweeps.empty:
        return "<p><em>(no sweep: no two points of one model differ in exactly one setting)</em></p>"
    parts = [_term("paired")]
    for name, part in report.sweeps.groupby("experiment", sort=False):
        budget = str(part["key"].iloc[0]).endswith(("max_tokens", "reasoning_effort"))
        keep = ["value", "point", "n_runs", "n_tasks", "overall_pct", "ci_low_pct", "ci_high_pct", "reference",
                "diff_pp", "diff_ci_low_pp", "diff_ci_high_pp", "p_holm", "distinguishable", "small_n"]
        if budget:
            keep += ["truncated_pct", "mean_output_tokens", "mean_reasoning_tokens", "over_judge_limit_pct",
                     "cost_usd", "usd_per_point"]
        sid = _anchor(str(name))
        parts.append(f'<h3 id="{sid}">{html.escape(str(name))}</h3>'
                     + _img(pngs.get(f"sweep_{sid}.png"), f"score over {name}") + _table(part[keep]))
    return "".join(parts)


def _anchor(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


def _ablations_html(report: Report) -> str:
    if report.ablations.empty:
        return "<p><em>(no ablation: no two points differ only in the panel's judges)</em></p>"
    return ("<p>Each variant's score beside the full panel's on the same answers, the paired difference, each "
            "model's rank under both panels, Kendall τ between the two rankings of the models ablated the same "
            "way (with a bootstrap interval over tasks; undefined with fewer than two models) and the tasks whose "
            "score moved most.</p>" + _term("paired") + _tau_note(report.ablations)
            + _table(report.ablations.drop(columns=["experiment"])))


def _tau_note(ablations: pd.DataFrame) -> str:
    """Why Kendall τ is empty, said once above the table where no variant has one."""
    reasons = set(ablations.get("tau_not_shown", pd.Series(dtype=str)).fillna(""))
    if "" in reasons or not reasons:
        return ""
    return ("<p><b>Kendall τ is not shown:</b> " + html.escape("; ".join(sorted(reasons)))
            + ". Run another model with the same panels to compare rankings.</p>")


#: The spec's claim the family check is read against (§4), word for word.
SPEC_FAMILY_CLAIM = ("simple mean, no same-family exclusion — we verified family judges show no measurable bias "
                     "on this set")


def _family_html(report: Report) -> str:
    claim = f"<p>The spec (§4): <q>{html.escape(SPEC_FAMILY_CLAIM)}</q>.</p>"
    if not shown(report.family):
        return claim + f"<p><em>{html.escape(HOW_TO)}</em></p>"
    return (claim + "<p>Per judge, over the baseline leaderboard's models: its <em>offset</em> on a task is its "
            "score minus the other judges' mean on the same answer; <em>family bias</em> is its mean offset on "
            "contestants of its own family minus its mean offset on the other contestants (pp), with a paired t "
            "interval over tasks, Holm-adjusted across the judges (<em>distinguishable</em>: p_holm &lt; 0.05). "
            "A judge that is only harsher or more lenient than the others moves both offsets alike. The last "
            "columns re-rank the models with that judge dropped from the panel mean: the ranks that move and "
            "Kendall τ against the full panel's ranking.</p>" + _table(report.family))


def _reruns_html(report: Report, pngs: dict[str, bytes]) -> str:
    intra = intra_rater_frame(report.agreement)
    return ("<p>Each point with two or more runs: the spread of its score over the runs, the variance split and "
            "each judge against itself.</p>" + _term("variance")
            + _table(report.reruns.drop(columns=["experiment"]) if len(report.reruns) else report.reruns,
                     "(no point with replicates)")
            + _img(pngs.get("noise.png"), "variance by source")
            + "<h3>Each judge against itself (intra-rater)</h3>" + _term("alpha")
            + _table(intra, "(no judge replicate: run the same answers with judge_panel.replicate=1,2)"))


def page(report: Report, pngs: dict[str, bytes]) -> str:
    """report.html: a contents list, every section by id, tables and plots inline, nothing fetched."""
    gaps = report.gaps
    body = {
        "leaderboard": "<p>One row per model at the baseline setting: the spec's decoding and the full judge "
                       "panel (a model without such a point shows its closest one, with what differs in "
                       "<em>not_spec_setting</em>). Scores in %, All view. Rank: 1 is best; its interval and "
                       "P(rank 1) come from a bootstrap over tasks.</p>" + _term("interval")
                       + _table(report.baseline, "(no run)") + _img(pngs.get("leaderboard.png"), "leaderboard")
                       + "<h3>Neighbouring rows</h3>" + _term("paired")
                       + _table(gaps, "(fewer than two models)"),
        "sweeps": _sweeps_html(report, pngs),
        "ablations": _ablations_html(report),
        "reruns": _reruns_html(report, pngs),
        "judge-agreement": _judge_agreement_html(report, pngs),
        "judge-family": _family_html(report),
        "judge-splits": "<p>Rubric items where the judges of one run gave different points to the same answer, "
                        "most often first (top 20): each judge's mean points for the item.</p>"
                        + _table(_rates_in_pct(report.splits),
                                 "(no per-item points: judgments.json not read, or the judges never split)"),
        "paradigms-tiers": "<h3>By language (%: English / Chinese by the spec's CJK rule)</h3>"
                           + _table(report.languages) + "<h3>By paradigm (%)</h3>" + _table(report.paradigms)
                           + "<h3>By context tier (%)</h3>"
                           + _table(report.tiers) + _img(pngs.get("tiers.png"), "score by context tier"),
        "points": "<p>Every point (replicate group) read, sweep and ablation points included, with both views "
                  "(%); n_unscored counts tasks every judge failed on (0 in the All view), n_not_reached the "
                  "tasks a stopped run never reached (0 in the All view). Its intervals are percentile bootstraps "
                  "over tasks at any n; below 30 tasks they run narrow and the row is flagged small n.</p>"
                  + _table(leaderboard_view(report.leaderboard)),
        "matched-panel": "<p>Each row's mean over the tasks every row scored (%). It drops the long-context "
                         "failures the All view counts: a robustness check only.</p>" + _table(report.matched),
        "provenance": _table(report.provenance) + "<h3>Prompt cache</h3><p>Per run and endpoint, the calls it "
                      "sent: input tokens, those read from the provider's cache and written to it, the hit rate (the "
                      "share of input tokens read, %) and the USD saved (every input token a miss, less the bill; a "
                      "write that costs more than input counts against it).</p>"
                      + _table(report.prompt_cache, "(no call reported its input tokens)"),
    }
    sections = "".join(f'<section id="{sid}"><h2>{html.escape(title)}</h2>{body[sid]}</section>'
                       for sid, title in SECTIONS.items())
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>WildTrace report</title>"
            f"<style>{CSS}</style></head><body><h1>WildTrace report</h1><p>{html.escape(_method(report))}</p>"
            f"{_contents()}{sections}</body></html>")


def _json_default(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


def write(report: Report, out_dir: Path) -> list[Path]:
    """Write every file of the report into ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in tables(report).items():
        frame.to_csv(out_dir / f"{name}.csv", index=False)
        written.append(out_dir / f"{name}.csv")
    (out_dir / "leaderboard.md").write_text(leaderboard_md(report), encoding="utf-8")
    (out_dir / "judge_agreement.json").write_text(json.dumps(report.agreement, indent=2, default=_json_default),
                                                  encoding="utf-8")
    (out_dir / "noise.json").write_text(json.dumps({"rows": report.noise}, indent=2, default=_json_default),
                                        encoding="utf-8")
    pngs = plots(report)
    for name, data in pngs.items():
        (out_dir / name).write_bytes(data)
    (out_dir / "report.html").write_text(page(report, pngs), encoding="utf-8")
    written += [out_dir / "leaderboard.md", out_dir / "judge_agreement.json", out_dir / "noise.json",
                out_dir / "report.html"]
    return written + [out_dir / name for name in pngs]
