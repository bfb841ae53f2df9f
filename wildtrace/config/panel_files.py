"""Ablation panels as delta files: a panel file that starts from another panel and drops judges.

``conf/judge_panel/paper_without_qwen.yaml`` lists its parent (``- paper``) and, for each judge
it leaves out, ``- override /judge@judges.<key>: null``: the defaults-list entry that would
have composed that judge chooses no config, so its key is never made. This is Hydra's own
way to leave an entry out; an OmegaConf merge can add or change a key but never delete one.
The composed panel is the parent's without those judges (same keys, same order, same
endpoints, so the same cache keys) and, with the file's own ``name``, the same run folders
and MLflow tags as a full copy of the panel would give.

Hydra refuses a drop of a judge the parent does not compose, but while composing, with exit 1
and its own text. ``check_panel_drops`` reads the panel files a command line chooses first and
refuses such a file as bad input (exit 2 at the entry point), naming the file and the entry.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml  # PyYAML: what OmegaConf (and so Hydra) parses these files with; omegaconf requires it
from omegaconf import OmegaConf

from wildtrace.config import ConfigError

GROUP = "judge_panel"
#: A panel's defaults entry that composes (or, with ``override``, re-chooses or drops) one judge.
_JUDGE_ENTRY = re.compile(r"^(override\s+)?/judge@judges\.([A-Za-z0-9_-]+)$")


def _defaults(path: Path) -> list[Any]:
    """The file's defaults list as plain values (interpolations left alone: nothing here resolves them)."""
    try:
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:  # Hydra would refuse it too, with exit 1
        raise ConfigError(f"{path}: cannot be read as YAML ({str(exc).splitlines()[0]})") from None
    found = node.get("defaults") if isinstance(node, dict) else None
    return found if isinstance(found, list) else []


def _parent(entry: str) -> str | None:
    """``paper`` or ``/judge_panel/paper`` → ``paper``: another panel this one starts from (None otherwise)."""
    name = entry.removeprefix(f"/{GROUP}/")
    return None if name == "_self_" or "/" in name or " " in name else name


def _judges(conf_dir: Path, panel: str, seen: frozenset[str], errors: list[str]) -> list[str]:
    """The judge keys ``panel`` composes, in order; each drop of a key not composed by then goes to ``errors``."""
    path = conf_dir / GROUP / f"{panel}.yaml"
    if panel in seen or not path.is_file():  # a missing option or a loop is for the name check and Hydra to name
        return []
    judges: list[str] = []
    for entry in _defaults(path):
        if isinstance(entry, str) and (parent := _parent(entry)) is not None:
            judges += _judges(conf_dir, parent, seen | {panel}, errors)
        elif isinstance(entry, dict) and len(entry) == 1:
            ((key, value),) = entry.items()
            match = _JUDGE_ENTRY.match(str(key).strip())
            if match is None:
                continue
            override, judge = match.groups()
            if not override:
                judges.append(judge)
            elif judge not in judges:
                errors.append(_refusal(path, key, value, judge, judges))
            elif value is None:
                judges.remove(judge)
    return judges


def _refusal(path: Path, key: str, value: Any, judge: str, judges: list[str]) -> str:
    """The error for a drop (or re-choice) of a judge the panel does not compose at that point."""
    nearest = difflib.get_close_matches(judge, judges, n=1, cutoff=0.6)
    hint = f"; did you mean {nearest[0]}?" if nearest else ""
    entry = f"{key}: {'null' if value is None else value}"
    return (f"{path}: defaults entry '{entry}' names judge {judge!r}, which the panel it starts from does not "
            f"compose (its judges: {', '.join(judges) or 'none'}{hint})")


def panel_errors(conf_dir: Path, panels: Iterable[str]) -> list[str]:
    """Every refused drop in these panel files (and the panels they start from); empty when all are sound."""
    errors: list[str] = []
    for panel in dict.fromkeys(panels):
        _judges(conf_dir, panel, frozenset(), errors)
    return list(dict.fromkeys(errors))


def check_panel_drops(overrides: list[str], conf_dir: Path) -> None:
    """Refuse, before Hydra composes, a chosen panel file that drops a judge its parent does not have.

    Looks at the panels a ``judge_panel=…`` override chooses (a value or a choice sweep); the
    default panel and other sweeps are left to Hydra, which refuses the same file (exit 1).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from wildtrace.config.checks import _choices

    chosen: list[str] = []
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        if o.key_or_group == GROUP and o.package is None and not (o.is_add() or o.is_delete()):
            chosen += [v for v in _choices(o) if isinstance(v, str)]
    errors = panel_errors(conf_dir, chosen)
    if errors:
        raise ConfigError("; ".join(errors))
