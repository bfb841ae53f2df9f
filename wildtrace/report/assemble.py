"""The report assembled: every table of one report from the runs read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from wildtrace.core import views
from wildtrace.report import experiments
from wildtrace.report.family import family_frame
from wildtrace.report.statistics.stats import DEFAULT_BOOTSTRAP, Bootstrap
from wildtrace.report.tables import (RunData, breakdowns, dedupe, group_runs, judge_agreement, judge_splits,
                                     languages, leaderboard, leaderboard_gaps, matched, noise_rows, prompt_cache,
                                     provenance,
                                     replicates, with_judge_noise, with_replicate_drift)


@dataclass
class Report:
    """Every table of one report."""

    leaderboard: pd.DataFrame
    matched: pd.DataFrame
    paradigms: pd.DataFrame
    tiers: pd.DataFrame
    agreement: dict
    replicates: pd.DataFrame
    replicate_tasks: pd.DataFrame
    provenance: pd.DataFrame
    boot: Bootstrap
    n_runs_read: int
    duplicates: dict[str, str] = field(default_factory=dict)
    #: noise.json rows: each replicated row's sd (pp) from tasks, answers and judges
    noise: list[dict] = field(default_factory=list)
    #: adjacent leaderboard rows: the gap, its paired t interval, Holm-adjusted p, distinguishable or not
    gaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    item_flips: pd.DataFrame = field(default_factory=pd.DataFrame)  #: per (judge, task, rubric item) flip rate
    splits: pd.DataFrame = field(default_factory=pd.DataFrame)  #: the rubric items the panel disagrees on most
    experiments: list = field(default_factory=list)  #: experiments.Experiment: sweeps, ablations, rerun sets
    baseline: pd.DataFrame = field(default_factory=pd.DataFrame)  #: one row per model at the baseline setting
    sweeps: pd.DataFrame = field(default_factory=pd.DataFrame)  #: sweeps.csv
    ablations: pd.DataFrame = field(default_factory=pd.DataFrame)  #: ablations.csv
    reruns: pd.DataFrame = field(default_factory=pd.DataFrame)  #: reruns.csv
    languages: pd.DataFrame = field(default_factory=pd.DataFrame)  #: the All view per language, with n and interval
    #: per run and endpoint: input tokens, cache reads and writes, hit rate, USD saved (prompt_cache.csv)
    prompt_cache: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: family.csv: per judge, its offset on same-family contestants against the others' (report.family)
    family: pd.DataFrame = field(default_factory=pd.DataFrame)


def build(runs: Sequence[RunData], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> Report:
    """All tables from the runs read: dedupe, group, recognise the experiments, then each section."""
    kept, duplicates = dedupe(runs)
    experiments.log_warnings_for_partial(kept)
    groups = group_runs(kept)
    reps, rep_tasks = replicates(groups)
    reps = with_replicate_drift(groups, reps)
    agreement, flips = with_judge_noise(judge_agreement(kept, boot), kept, boot)
    board = leaderboard(groups, boot)
    found = experiments.recognise(groups)
    noise_table = noise_rows(groups, boot)
    baseline = experiments.baseline_board(groups, boot)
    base = experiments.baselines(groups)
    return Report(experiments=found, baseline=baseline,
                  sweeps=experiments.sweeps_frame(found, boot), ablations=experiments.ablations_frame(found, boot),
                  reruns=experiments.reruns_frame(found, noise_table), leaderboard=board, matched=matched(groups),
                  paradigms=breakdowns(groups, views.PARADIGM), tiers=breakdowns(groups, views.TIER),
                  languages=languages(groups, boot),
                  family=family_frame([base[m] for m in sorted(base)], boot.level),
                  agreement=agreement, replicates=reps, replicate_tasks=rep_tasks,
                  provenance=provenance(groups, duplicates), prompt_cache=prompt_cache(groups), boot=boot,
                  n_runs_read=len(runs), duplicates=duplicates, noise=noise_table,
                  gaps=leaderboard_gaps(groups, baseline.rename(columns={"model": "name", "point": "model"}), boot),
                  item_flips=flips, splits=judge_splits(kept))
