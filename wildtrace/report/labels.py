"""Stable labels: a point is named by its model and what its own settings change against the
spec's defaults (temperature 0.1, the model's default budget, no reasoning effort, the panel
file's judges) and its own other overrides, never by what else is in the store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

#: Config keys that name where or when a run happened, not what it did.
#: ``prompt_repeats`` and ``sweep_decodings`` say how a sweep's job schedules its repeats (the other points
#: it sends while the provider holds a prompt), not what it was asked: every job of a sweep holds other ones.
RUN_SPECIFIC = ("out_dir", "progress", "root", "cache", "mlflow", "responses", "prompt_repeats", "sweep_decodings")
#: The spec's decoding (conf/decoding/paper.yaml): what a baseline point is run with.
SPEC_TEMPERATURE = 0.1
#: The budget max_tokens: null picks (spec §2): reasoning models 32768, the others 8192.
SPEC_MAX_TOKENS = {True: 32768, False: 8192}
#: Where the panel files live (a run's panel composition is read against its file).
CONF_DIR = Path(__file__).resolve().parent.parent.parent / "conf"


def panel_file_judges(name: str) -> list[str] | None:
    """The judges a panel file composes (conf/judge_panel/<name>.yaml), None when there is no such file."""
    path = CONF_DIR / "judge_panel" / f"{name}.yaml"
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out = []
    for entry in data.get("defaults") or []:
        if isinstance(entry, dict):
            for target in entry:
                if "@judges." in str(target):
                    out.append(str(target).split("@judges.", 1)[1])
    return sorted(out + list((data.get("judges") or {}).keys()))


# --------------------------------------------------------------------------- stable labels


def _override_parts(run: Any, described: set[str]) -> list[str]:
    """The run's own overrides not already described: settings only, no replicate, place or group choice."""
    parts = []
    for override in run.stats.get("overrides") or []:
        key, _, value = str(override).partition("=")
        bare = key.lstrip("+~")
        top = bare.split(".", 1)[0]
        if (top in RUN_SPECIFIC or top == "hydra" or bare.endswith(".replicate") or "." not in bare
                or bare in described or bare.startswith("judge_panel.judges.") or bare.endswith(".family")):
            continue
        parts.append(f"{bare}={value}")
    return parts


def deviations(run: Any) -> list[str]:
    """What the run changes against the spec's defaults, in words (empty: a baseline point)."""
    c = run.config
    decoding = c.get("decoding") or {}
    parts: list[str] = []
    t = decoding.get("temperature")
    if t is not None and float(t) != SPEC_TEMPERATURE:
        parts.append(f"t={t}")
    default_budget = SPEC_MAX_TOKENS[bool((c.get("model") or {}).get("reasoning"))]
    budget = run.stats.get("effective_max_tokens") or decoding.get("max_tokens")
    if decoding.get("max_tokens") is not None and budget != default_budget:
        parts.append(f"max_tokens={budget}")
    if decoding.get("reasoning_effort") is not None:
        parts.append(f"effort={decoding['reasoning_effort']}")
    panel = c.get("judge_panel") or {}
    judges = sorted(panel.get("judges") or {})
    full = panel_file_judges(str(panel.get("name")))
    if full is None:  # a panel with no file here: its name and judges say which it is
        parts.append(f"panel={panel.get('name')} ({','.join(judges)})")
    elif judges != full:
        dropped = [j for j in full if j not in judges]
        added = [j for j in judges if j not in full]
        parts += [f"without {j}" for j in dropped] + [f"with {j}" for j in added]
    described = {"decoding.temperature", "decoding.max_tokens", "decoding.reasoning_effort"}
    return parts + _override_parts(run, described)


def label_groups(groups: Sequence[Any]) -> None:
    """Each point's stable label: its model, then its deviations (a short hash where two points
    would otherwise share a label, taken from the point's own settings)."""
    labels = []
    for g in groups:
        run = g.runs[0]
        labels.append(" · ".join([str(run.config["model"]["name"]), *deviations(run)]))
    for g, label in zip(groups, labels, strict=True):
        g.label = label if labels.count(label) == 1 else f"{label} · {g.key[:6]}"
