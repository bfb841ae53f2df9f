"""Checks on a composed run that the schemas alone do not make: unknown keys, and the spec's warnings.

Hydra rejects an unknown key given as ``key=value``, but ``+key=value`` (what Hydra's own
error message suggests) adds it to a structured node, and ``OmegaConf.to_object`` then drops
it silently: ``+decoding.temprature=0.3`` would run at t=0.1 and be logged as a setting.
``unknown_keys`` walks the composed config against the dataclass schema instead.

``spec_warnings`` is pure: it reads validated settings and returns (code, message) pairs.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from wildtrace.config import (REASONING_BUDGET, ConfigError, EndpointConfig, RetiredConfig, WildtraceConfig,
                              effective_max_tokens)
from wildtrace.core.credentials import key_like_name, looks_like_key
from wildtrace.providers.registry import provider_class

#: A key and the names that would have been valid where it stands.
Unknown = tuple[str, tuple[str, ...]]


def _plain(cfg: DictConfig | Mapping[str, Any]) -> Mapping[str, Any]:
    """The config as plain dicts, interpolations left unresolved (a key check must not resolve ${oc.env:…})."""
    if isinstance(cfg, DictConfig):
        return typing.cast(Mapping[str, Any], OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False))
    return cfg


def _unwrap_optional(tp: Any) -> Any:
    """``Optional[X]`` → ``X``; anything else unchanged."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _field_types(schema_cls: type) -> dict[str, Any]:
    """Field name → resolved type (the schemas use ``from __future__ import annotations``)."""
    hints = typing.get_type_hints(schema_cls)
    return {f.name: _unwrap_optional(hints[f.name]) for f in dataclasses.fields(schema_cls)}


def _walk(node: Mapping[str, Any], schema_cls: type, prefix: str) -> Iterator[Unknown]:
    """Yield every key of ``node`` the dataclass ``schema_cls`` does not declare, recursively."""
    types_ = _field_types(schema_cls)
    for key, value in node.items():
        path = f"{prefix}{key}"
        if key not in types_:
            yield path, tuple(types_)
            continue
        if isinstance(value, Mapping):
            yield from _walk_value(value, types_[key], path)


def _walk_value(value: Mapping[str, Any], tp: Any, path: str) -> Iterator[Unknown]:
    """Descend into a mapping-valued field: a nested schema, or a dict whose values have one."""
    if dataclasses.is_dataclass(tp):
        yield from _walk(value, typing.cast(type, tp), path + ".")
    elif typing.get_origin(tp) is dict:
        # Free-form keys at this level (judge keys, extra_body); values checked when they have a schema.
        value_type = _unwrap_optional(typing.get_args(tp)[1])
        if dataclasses.is_dataclass(value_type):
            for key, item in value.items():
                if isinstance(item, Mapping):
                    yield from _walk(item, typing.cast(type, value_type), f"{path}.{key}.")


def unknown_keys(dict_cfg: DictConfig | Mapping[str, Any], schema_cls: type = WildtraceConfig) -> list[str]:
    """Dotted paths of the keys in ``dict_cfg`` that ``schema_cls`` (a dataclass) does not declare."""
    return [path for path, _ in _walk(_plain(dict_cfg), schema_cls, "")]


def describe(path: str, valid: tuple[str, ...]) -> str:
    """``decoding.temprature (did you mean decoding.temperature?)`` — the nearest valid name by difflib."""
    parent, _, name = path.rpartition(".")
    nearest = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if not nearest:
        return f"{path} (valid keys there: {', '.join(valid)})"
    return f"{path} (did you mean {parent + '.' if parent else ''}{nearest[0]}?)"


def check_known_keys(dict_cfg: DictConfig | Mapping[str, Any], schema_cls: type = WildtraceConfig) -> None:
    """Raise ConfigError naming every unknown key and the nearest valid one; silent when all are known."""
    found = list(_walk(_plain(dict_cfg), schema_cls, ""))
    if found:
        names = "; ".join(describe(path, valid) for path, valid in found)
        raise ConfigError(f"unknown config key{'s' if len(found) > 1 else ''}: {names}")


def _unknown_segment(key: str, schema_cls: type, top_valid: tuple[str, ...]) -> Unknown | None:
    """The first segment of a dotted override key the schema does not declare (None when every one is known).

    Walks only as far as the schema is typed: below a free-form mapping (judge keys, extra_body)
    a segment names an entry, and the composed-config check (``check_known_keys``) sees the rest.
    """
    parts, cls, valid = key.split("."), schema_cls, top_valid
    for i, part in enumerate(parts):
        types_ = _field_types(cls)
        if part not in types_:
            return ".".join(parts[:i + 1]), valid if i == 0 else tuple(types_)
        tp = types_[part]
        if typing.get_origin(tp) is dict and i + 1 < len(parts):
            tp = _unwrap_optional(typing.get_args(tp)[1])
            parts_left = parts[i + 2:]
            if not parts_left or not dataclasses.is_dataclass(tp):
                return None
            value_cls = typing.cast(type, tp)
            found = _unknown_segment(".".join(parts_left), value_cls, tuple(_field_types(value_cls)))
            return None if found is None else (".".join(parts[:i + 2]) + "." + found[0], found[1])
        if not dataclasses.is_dataclass(tp):
            return None
        cls = typing.cast(type, tp)
    return None


def _group_options(conf_dir: Path, group: str) -> list[str]:
    """The options of a config group: its YAML files (sub-folders as ``sub/name``)."""
    root = conf_dir / group
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def _option_errors(conf_dir: Path, group: str, values: list[Any]) -> list[str]:
    """``group=value`` for each value the group has no file for, with the nearest option."""
    options = _group_options(conf_dir, group)
    out = []
    for value in values:
        if isinstance(value, str) and value not in options:
            nearest = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
            hint = f"did you mean {group}={nearest[0]}?" if nearest else f"options: {', '.join(options)}"
            out.append(f"{group}={value} (no such {group} in {conf_dir / group}; {hint})")
    return out


def _choices(override: Any) -> list[Any]:
    """The option names a group override selects: its value, or a choice sweep's values (others: none)."""
    if not override.is_sweep_override():
        return [override.value()]
    return list(override.sweep_string_iterator()) if override.is_choice_sweep() else []


def check_override_names(overrides: list[str], schema_cls: type = WildtraceConfig,
                         conf_dir: Path | None = None) -> None:
    """Refuse, before Hydra composes, an override whose group, option or key does not exist.

    ``judge_pannel=offline`` gets the same "did you mean judge_panel?" as a mistyped key (Hydra
    would say "To append to your config use +judge_pannel=offline" and exit 1); an override that
    does not parse is refused here too. Additions (``+key=``) and package overrides
    (``group@pkg=``) are left to Hydra and to ``check_known_keys`` after composing.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as exc:
        raise ConfigError(f"an override does not parse: {str(exc).splitlines()[0]}") from None
    groups = sorted(p.name for p in conf_dir.iterdir() if p.is_dir()) if conf_dir is not None else []
    top = tuple(dict.fromkeys([*_field_types(schema_cls), *groups]))
    unknown: list[Unknown] = []
    options: list[str] = []
    for o in parsed:
        key = o.key_or_group
        if o.is_add() or o.is_force_add() or o.package is not None or "/" in key or key.split(".")[0] == "hydra":
            continue
        if key in groups and not o.is_delete():
            options += _option_errors(typing.cast(Path, conf_dir), key, _choices(o))
            continue
        found = _unknown_segment(key, schema_cls, top)
        if found is not None:
            unknown.append(found)
    names = [describe(path, valid) for path, valid in unknown]
    if names:
        raise ConfigError(f"unknown config key{'s' if len(names) > 1 else ''}: {'; '.join(names)}")
    if options:
        raise ConfigError(f"unknown config option{'s' if len(options) > 1 else ''}: {'; '.join(options)}")


#: Labels the run gives the model's own endpoint: a judge under one of these keys would take its
#: place (endpoints, requests, failures and served-model rules are all keyed by label).
RESERVED_JUDGE_KEYS = frozenset({"model"})


def check_reserved(settings: WildtraceConfig) -> None:
    """Refuse a judge key the model's endpoint uses: judge ``model`` would answer the questions."""
    for key in settings.judge_panel.judges:
        if key in RESERVED_JUDGE_KEYS:
            raise ConfigError(f"judge_panel.judges.{key}: the judge key {key!r} is reserved for the model under "
                              "test (its endpoint is labelled so); give this judge another key")


# ---------------------------------------------------------------------------------------------
# The spec's warnings (§2 budget, §4 non-contestant panel)

#: A dated release suffix: -20260217, @20260217, -2026-02-17.
_DATED = re.compile(r"(?:[-@_]\d{8}|-\d{4}-\d{2}-\d{2})$")
#: A gateway's short route prefix such as the paper's ``mr.``: letters, then a dot, then a letter.
_GATEWAY_PREFIX = re.compile(r"^[a-z]{1,8}\.(?=[a-z])")


def check_overrides(overrides: list[str]) -> None:
    """Refuse ``X={}`` on a mapping: Hydra merges an empty mapping, so it would silently change nothing."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if value.strip() in ("{}", "null") and key.strip() == "judge_panel.judges":
            raise ConfigError(f"{override}: judge_panel.judges cannot be emptied this way (Hydra merges it, and a "
                              "panel with no judge cannot judge): use stage=answer to skip judging, or "
                              "~judge_panel.judges.<key> to drop a judge")


#: The URL in an override's text (a sweep's values are separated by commas).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s,\[\]{}()'\"]+")
#: Where a key goes instead, said in every refusal.
_KEY_HOME = ("A key is read from the environment variable the endpoint's api_key_env names, never from the config: "
             "every setting is written to .hydra/, config.json, MLflow and the cache")


def url_credentials(url: str) -> list[str]:
    """What in ``url`` holds a credential: ``user info``, ``query parameter 'key'``, … (empty: none).

    Named, never shown: the text returned holds no part of the value."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return []
    found = ["user info (user:…@)"] if "@" in parts.netloc else []
    names = dict.fromkeys(name for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return found + [f"query parameter {name!r}" for name in names if key_like_name(name)]


def _key_like_paths(value: Any, path: str) -> Iterator[str]:
    """The dotted path of every key-like name inside a mapping value (``{api_key: …}``), at any depth."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}"
            if key_like_name(str(key)):
                yield here
            else:
                yield from _key_like_paths(item, here)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _key_like_paths(item, f"{path}[{i}]")


def _override_values(text: str) -> list[Any]:
    """An override's value(s) as Hydra reads them (a sweep's each), or the raw text split at commas."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(text)
        if override.is_sweep_override():
            return list(override.sweep_iterator()) if override.is_discrete_sweep() else []
        return [override.value()]
    except (HydraException, ValueError, TypeError):  # not Hydra's to parse here: check the text
        return text.partition("=")[2].split(",")


def override_secrets(override: str) -> list[str]:
    """Where one command-line override would put a credential (empty: nowhere); names, never values."""
    key = override.lstrip("+~").partition("=")[0].partition("@")[0].strip()
    problems = [f"{key}: a URL holding a credential ({', '.join(found)})"
                for url in _URL.findall(override) if (found := url_credentials(url))][:1]
    segments = [s for s in key.split(".") if s]
    named = next((".".join(segments[:i + 1]) for i, s in enumerate(segments) if key_like_name(s)), None)
    if named is not None and "=" in override:
        problems.append(f"{named}: a key-like name; a credential set here would be written down")
    values = _override_values(override) if "=" in override else []
    for value in values:
        problems += [f"{p}: a key-like name; a credential set here would be written down"
                     for p in _key_like_paths(value, key)]
    if key.endswith("api_key_env") and any(isinstance(v, str) and looks_like_key(v) for v in values):
        problems.append(f"{key}: holds what looks like an API key, not the NAME of the variable that holds it "
                        "(e.g. OPENAI_API_KEY); put the key in that variable")
    return list(dict.fromkeys(problems))


def check_override_secrets(overrides: list[str]) -> None:
    """Refuse, before Hydra writes anything, every override that would put a credential in the config.

    Hydra saves the command line (``.hydra/overrides.yaml``, ``multirun.yaml``) and the job
    logs it before any job runs, so this reads the raw overrides. The error names each key
    and never shows a value."""
    problems = [p for o in overrides for p in override_secrets(o)]
    if problems:
        raise ConfigError(f"refused before anything was written: {'; '.join(dict.fromkeys(problems))}. {_KEY_HOME}")


def check_settings_secrets(settings: WildtraceConfig) -> None:
    """The composed config's own URLs and request options (config files, ``${oc.env:…}``) hold no credential."""
    endpoints: list[tuple[str, EndpointConfig]] = [("model", settings.model)]
    endpoints += [(f"judge_panel.judges.{k}", j) for k, j in settings.judge_panel.judges.items()]
    problems = [f"{key}.base_url: a URL holding a credential ({', '.join(found)})"
                for key, e in endpoints if (found := url_credentials(e.base_url or ""))]
    problems += [f"{p}: a key-like name" for key, e in endpoints
                 for p in _key_like_paths(e.extra_body, f"{key}.extra_body")]
    if (found := url_credentials(settings.gateway.base_url or "")):
        problems.append(f"gateway.base_url: a URL holding a credential ({', '.join(found)})")
    if problems:
        raise ConfigError(f"{'; '.join(dict.fromkeys(problems))}. {_KEY_HOME}")


#: A Hydra launcher option → (the plugin module it needs, what installs it).
LAUNCHERS = {
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "pip install 'wildtrace[team]' (hydra-joblib-launcher)"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher",
                       "pip install 'wildtrace[team]' (hydra-submitit-launcher)"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher",
                       "pip install 'wildtrace[team]' (hydra-submitit-launcher)"),
    "slurm": ("hydra_plugins.hydra_submitit_launcher", "pip install 'wildtrace[team]' (hydra-submitit-launcher)"),
    "ray_cluster": ("hydra_plugins.hydra_ray_launcher", "pip install hydra-ray-launcher"),
}


def check_launcher(overrides: list[str]) -> None:
    """A ``hydra/launcher=…`` whose plugin is not installed: the package to install, not Hydra's "Could not
    find 'hydra/launcher/joblib'" (exit 1)."""
    import importlib.util

    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() != "hydra/launcher" or value.strip() not in LAUNCHERS:
            continue
        module, install = LAUNCHERS[value.strip()]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"hydra/launcher={value.strip()} needs a launcher that is not installed: {install}")


def model_identity(text: str | None) -> str:
    """A route or name reduced to what identifies the model: lower case, no provider path, gateway prefix or date."""
    ident = (text or "").strip().lower().rsplit("/", 1)[-1]
    ident = _GATEWAY_PREFIX.sub("", ident)
    return _DATED.sub("", ident)


def _identities(name: str | None, route: str | None) -> set[str]:
    """The non-empty identities an endpoint goes by (its name and its route)."""
    return {i for i in (model_identity(name), model_identity(route)) if i}


def budget_warning(settings: WildtraceConfig) -> list[tuple[str, str]]:
    """Spec §2: a reasoning model given less than 32768 completion tokens (only when answers are generated)."""
    budget = effective_max_tokens(settings.model, settings.decoding)
    if settings.stage == "judge" or not settings.model.reasoning or budget >= REASONING_BUDGET:
        return []
    return [("reasoning_budget",
             f"model {settings.model.name} is a reasoning model (model.reasoning=true) given a budget of {budget} "
             f"tokens: the spec (§2) asks for {REASONING_BUDGET}; reasoning models truncated below this lose ~7pp")]


def contestant_judge_warning(settings: WildtraceConfig) -> list[tuple[str, str]]:
    """Spec §4: the model under test is also on the judge panel (same route or name, dates and prefixes aside)."""
    if settings.stage == "answer":
        return []
    model = _identities(settings.model.name, settings.model.route)
    out = []
    for key, judge in settings.judge_panel.judges.items():
        if model & _identities(judge.name, judge.route):
            out.append(("judge_is_contestant",
                        f"model {settings.model.name} (route {settings.model.route}) is also judge {key} "
                        f"(route {judge.route}): the spec's judges (§4) are not on the leaderboard"))
    return out


def output_limit_warning(settings: WildtraceConfig) -> list[tuple[str, str]]:
    """The budget sent exceeds the model's documented output limit (``model.max_output_tokens``).

    The spec's budget (§2) is still what is sent: the warning says the provider may cap the
    answer there or reject the request (then the call goes again at the limit, noted on its
    record: runtime/net/retry.next_step), with the limit and where it is documented."""
    model = settings.model
    budget = effective_max_tokens(model, settings.decoding)
    limit = model.max_output_tokens
    if settings.stage == "judge" or limit is None or budget <= limit:
        return []
    source = model.max_output_tokens_source or "source not recorded"
    return [("output_limit",
             f"model {model.name} documents an output limit of {limit} tokens ({source}); the run sends "
             f"{model.budget_field}={budget} as the spec (§2) asks: the provider may cap answers at {limit} "
             f"or reject the request, and a rejected call is sent again with {limit}, noted on its record")]


def spec_warnings(settings: WildtraceConfig) -> list[tuple[str, str]]:
    """Every spec warning for a run, as (code, message): ``reasoning_budget``, ``judge_is_contestant``,
    ``output_limit``."""
    return budget_warning(settings) + contestant_judge_warning(settings) + output_limit_warning(settings)


# ---------------------------------------------------------------------------------------------
# Retired routes (docs/providers/routes.md): the paper's exact model is gone from the first-party API

def _host(url: str) -> str:
    """The lower-case host of a base URL ("" when it has none)."""
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "").lower()


def _conf_retirements(conf_dir: Path) -> list[tuple[str, RetiredConfig]]:
    """(file, block) for every ``retired:`` block in conf/model/*.yaml and conf/judge/*.yaml."""
    out = []
    for group in ("model", "judge"):
        for path in sorted((conf_dir / group).glob("*.yaml")):
            node = OmegaConf.load(path)
            if isinstance(node, DictConfig) and node.get("retired") is not None:
                block = OmegaConf.merge(OmegaConf.structured(RetiredConfig), node.retired)
                out.append((f"conf/{group}/{path.name}", typing.cast(RetiredConfig, OmegaConf.to_object(block))))
    return out


def retirement_for(route: str, base_url: str,
                   blocks: list[tuple[str, RetiredConfig]]) -> tuple[str, RetiredConfig] | None:
    """The block that retires this route at this host, if any: the route (dates, prefixes aside) and the host
    both match."""
    ident, host = model_identity(route), _host(base_url)
    for where, block in blocks:
        if host in {h.lower() for h in block.hosts} and ident in {model_identity(r) for r in block.routes}:
            return where, block
    return None


def check_retired(settings: WildtraceConfig, conf_dir: Path | None = None) -> None:
    """Refuse, before any request, an endpoint of the run's stage whose route is retired at its first-party host
    (every such endpoint named at once: ``retired_problems``)."""
    problems = retired_problems(settings, conf_dir)
    if problems:
        raise ConfigError("\n  ".join(problems))


def retired_problems(settings: WildtraceConfig, conf_dir: Path | None = None) -> list[str]:
    """One message for each endpoint of the run's stage whose route is retired at its first-party host.

    The blocks are the endpoint's own ``retired`` and every ``retired:`` in the config tree's
    model and judge files, so ``model=custom model.route=<a retired route>`` and the paper
    CLI's config.json are refused too. Pointing the endpoint at another host (a gateway that
    still serves the model) or another route runs it.
    """
    shared = _conf_retirements(conf_dir) if conf_dir is not None else []
    endpoints: list[tuple[str, EndpointConfig]] = []
    if settings.stage != "judge":
        endpoints.append(("model", settings.model))
    if settings.stage != "answer":
        endpoints += [(f"judge_panel.judges.{k}", j) for k, j in settings.judge_panel.judges.items()]
    problems = []
    for key, e in endpoints:
        if provider_class(e.provider).local:
            continue
        own = [(f"{key}.retired", e.retired)] if e.retired is not None else []
        found = retirement_for(e.route, e.base_url, own + shared)
        if found is None:
            continue
        where, block = found
        still = "; ".join(block.served_by) if block.served_by else "none confirmed"
        problems.append(
            f"{key}: route {e.route!r} at {_host(e.base_url)} is retired since {block.date} ({where}): "
            f"{block.message.strip()} Still served by: {still}. To run it anyway, point {key}.base_url at a host "
            f"that serves it (or use access=gateway); to run another model, change {key}.route"
            + (f". Source: {block.source}" if block.source else ""))
    return problems
