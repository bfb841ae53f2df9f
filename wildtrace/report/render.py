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

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from wildtrace.report.tables import Report  # noqa: E402

#: Section ids of report.html, in page order, with their headings.
SECTIONS = {
    "leaderboard": "Leaderboard",
    "matched-panel": "Matched panel (robustness check, not the headline)",
    "paradigms-tiers": "Paradigms and context tiers",
    "judge-agreement": "Judge agreement",
    "replicates": "Replicates",
    "comparisons": "One-setting comparisons",
    "provenance": "Provenance",
}


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.4f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table (floats to 2 decimals, missing as —)."""
    if frame.empty:
        return "_(none)_\n"
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def agreement_frames(agreement: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """judge_agreement.json as two tables: per judge, per pair."""
    judges = pd.DataFrame([{"judge": k, "mean": v["mean"], "bias_vs_panel": v.get("bias"), "n": v["n"],
                            "unavailable_rate": v["unavailable_rate"]} for k, v in agreement["judges"].items()])
    pairs = pd.DataFrame([{"pair": k, "pearson": v["pearson"], "spearman": v["spearman"], "mad": v["mad"],
                           "n": v["n"]} for k, v in agreement["pairs"].items()])
    return judges, pairs


# --------------------------------------------------------------------------- plots


def _png(fig: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def plot_leaderboard(board: pd.DataFrame) -> bytes:
    """Both views per row with their bootstrap interval as whiskers."""
    fig, ax = plt.subplots(figsize=(8, 0.5 * max(len(board), 2) + 1.2))
    y = range(len(board))
    for offset, view, colour in ((-0.15, "overall", "tab:blue"), (0.15, "scored", "tab:orange")):
        values = board[view].astype(float)
        err = [values - board[f"{view}_ci_low"].astype(float), board[f"{view}_ci_high"].astype(float) - values]
        ax.errorbar(values, [i + offset for i in y], xerr=err, fmt="o", capsize=4, color=colour,
                    label="All view (overall)" if view == "overall" else "Scored view")
    ax.set_yticks(list(y), board["model"])
    ax.invert_yaxis()
    ax.set_xlabel("score (%) with 95% bootstrap interval over tasks")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    ax.grid(axis="x", alpha=0.3)
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


def plot_replicates(summary: pd.DataFrame) -> bytes:
    """Per row: the overall of each replicate (dots) and the mean per-task spread."""
    fig, ax = plt.subplots(figsize=(8, 0.6 * max(len(summary), 2) + 1.2))
    for i, row in enumerate(summary.itertuples(index=False)):
        ax.plot([row.overall_min, row.overall_max], [i, i], color="grey")
        ax.plot([row.overall_mean], [i], "o", color="tab:blue")
        ax.annotate(f"sd {row.overall_sd:.2f} pp · task sd {100 * row.task_sd_mean:.1f} pp",
                    (row.overall_max, i), xytext=(6, -3), textcoords="offset points", fontsize=8)
    ax.set_yticks(range(len(summary)), summary["model"])
    ax.invert_yaxis()
    ax.set_xlabel("overall (%) across replicates: range and mean")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def plots(report: Report) -> dict[str, bytes]:
    """name → PNG bytes for the plots the report has data for."""
    out = {}
    if len(report.leaderboard):
        out["leaderboard.png"] = plot_leaderboard(report.leaderboard)
    if len(report.tiers):
        out["tiers.png"] = plot_tiers(report.tiers)
    if report.agreement["judges"]:
        out["judge_agreement.png"] = plot_agreement(report.agreement)
    if len(report.replicates):
        out["replicates.png"] = plot_replicates(report.replicates)
    return out


# --------------------------------------------------------------------------- files


def tables(report: Report) -> dict[str, pd.DataFrame]:
    """name (without extension) → table, as written to CSV and logged to MLflow."""
    judges, pairs = agreement_frames(report.agreement)
    return {"leaderboard": report.leaderboard, "matched_panel": report.matched, "paradigms": report.paradigms,
            "tiers": report.tiers, "judges": judges, "judge_pairs": pairs, "replicates": report.replicates,
            "replicate_tasks": report.replicate_tasks, "comparisons": report.comparisons,
            "provenance": report.provenance}


def _method(report: Report) -> str:
    b = report.boot
    return (f"{report.n_runs_read} runs read, {len(report.duplicates)} identical duplicates counted once. "
            f"Intervals: percentile bootstrap over tasks, {b.resamples} resamples, seed {b.seed}, "
            f"{100 * b.level:g}% level. Scores in %; differences in percentage points.")


def leaderboard_md(report: Report) -> str:
    """leaderboard.md: the headline table, then the matched panel, labelled as the robustness check."""
    return ("# WildTrace leaderboard\n\n" + _method(report) + "\n\n`overall` is the All view (every task, "
            "failed / out-of-context / unscored as 0); `scored` is the mean over scored tasks.\n\n"
            + markdown(report.leaderboard) + "\n## Matched panel — robustness check (spec §5), not the headline\n\n"
            + markdown(report.matched))


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>(none)</em></p>"
    shown = frame.map(_cell) if hasattr(frame, "map") else frame.applymap(_cell)
    return shown.to_html(index=False, escape=True, border=0)


CSS = ("body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;margin:1em 0;"
       "font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}th{background:#eee}"
       "img{max-width:100%;display:block;margin:1em 0}section{margin-bottom:2.5em}")


def _interval(low: Any, high: Any) -> str:
    return "—" if low is None or high is None or low != low or high != high else f"{low:.2f}–{high:.2f}"


def leaderboard_view(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard for reading: each view with its interval in one column, the spread beside it."""
    if board.empty:
        return board
    view = board[["model", "panel", "release", "run_date"]].copy()
    view["overall (All)"] = board["overall"]
    view["overall 95% CI"] = [_interval(lo, hi) for lo, hi in zip(board["overall_ci_low"], board["overall_ci_high"])]
    view["scored"] = board["scored"]
    view["scored 95% CI"] = [_interval(lo, hi) for lo, hi in zip(board["scored_ci_low"], board["scored_ci_high"])]
    view["runs"] = board["n_runs"]
    view["sd"] = board["overall_sd"]
    view["range"] = [_interval(lo, hi) if n > 1 else "—" for lo, hi, n in
                     zip(board["overall_min"], board["overall_max"], board["n_runs"])]
    for column in ("n_scored", "n_out_of_context", "n_failed", "n_tasks"):
        view[column] = board[column]
    if "cost_usd" in board:  # USD the outcomes cost, and per point of the All view ("—" when unknown)
        view["cost USD"] = [_usd(v) for v in board["cost_usd"]]
        view["USD / point"] = [_usd(v) for v in board["usd_per_point"]]
    return view


def _usd(value: Any) -> str:
    return "—" if value is None or value != value else f"{value:,.4f}" if value < 1 else f"{value:,.2f}"


def page(report: Report, pngs: dict[str, bytes]) -> str:
    """report.html: every section by id, tables and plots inline, nothing fetched."""
    judges, pairs = agreement_frames(report.agreement)
    alpha = report.agreement.get("krippendorff_alpha_interval")
    body = {
        "leaderboard": _table(leaderboard_view(report.leaderboard)) + _img(pngs.get("leaderboard.png"), "leaderboard"),
        "matched-panel": "<p>Each row's mean over the tasks every row scored. It drops the long-context "
                         "failures the All view counts: a robustness check only.</p>" + _table(report.matched),
        "paradigms-tiers": "<h3>By paradigm</h3>" + _table(report.paradigms) + "<h3>By context tier</h3>"
                           + _table(report.tiers) + _img(pngs.get("tiers.png"), "score by context tier"),
        "judge-agreement": f"<p>Pooled over {report.agreement.get('n_runs', 0)} runs, "
                           f"{report.agreement.get('n_units', 0)} (run, task) units. Krippendorff's alpha "
                           f"(interval): <b>{_cell(alpha)}</b>.</p>" + _table(judges) + _table(pairs)
                           + _img(pngs.get("judge_agreement.png"), "judge agreement heatmap"),
        "replicates": _table(report.replicates) + _img(pngs.get("replicates.png"), "replicate spread"),
        "comparisons": "<p>Pairs of rows that differ in exactly one setting; diff = b − a over the tasks "
                       "both ran (All view, percentage points).</p>" + _table(report.comparisons),
        "provenance": _table(report.provenance),
    }
    sections = "".join(f'<section id="{sid}"><h2>{html.escape(title)}</h2>{body[sid]}</section>'
                       for sid, title in SECTIONS.items())
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>WildTrace report</title>"
            f"<style>{CSS}</style></head><body><h1>WildTrace report</h1><p>{html.escape(_method(report))}</p>"
            f"{sections}</body></html>")


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
    pngs = plots(report)
    for name, data in pngs.items():
        (out_dir / name).write_bytes(data)
    (out_dir / "report.html").write_text(page(report, pngs), encoding="utf-8")
    written += [out_dir / "leaderboard.md", out_dir / "judge_agreement.json", out_dir / "report.html"]
    return written + [out_dir / name for name in pngs]
