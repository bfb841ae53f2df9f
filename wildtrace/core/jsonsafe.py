"""STUB until the robust branch lands."""
from __future__ import annotations
import json, math
from typing import Any


def loads(data):
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def sanitize(value: Any, path: str = "$"):
    if isinstance(value, float) and not math.isfinite(value):
        return None, [path]
    if isinstance(value, dict):
        out, paths = {}, []
        for k, v in value.items():
            out[k], p = sanitize(v, f"{path}.{k}")
            paths += p
        return out, paths
    if isinstance(value, list):
        out, paths = [], []
        for i, v in enumerate(value):
            x, p = sanitize(v, f"{path}[{i}]")
            out.append(x); paths += p
        return out, paths
    return value, []
