"""The spec's §6 two-step workflow on the harness's own Hydra config and code path.

    wildtrace-eval  --config config.json --data tasks.json --corpus corpus/ --out mymodel.responses.json
    wildtrace-judge --config config.json --data tasks.json --responses mymodel.responses.json --out mymodel.scores.json

(also ``python -m wildtrace.paper eval|judge …``). ``config.json`` is read, checked and turned
into Hydra overrides of ``conf/config.yaml`` (``model=custom model.route=… model.base_url=…
model.api_key_env=API_KEY stage=answer …``, the judges as ``judge_panel.judges.<key>.*``), and
the composed config goes through the same ``prepare`` and ``wildtrace.runtime.run.execute.run`` as
``python -m wildtrace``: the same run directory, files, cache and MLflow run. One ``API_KEY``
variable serves every endpoint, as in §6.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from wildtrace.config import JUDGE_KEY, ConfigError
from wildtrace.config.checks import RESERVED_JUDGE_KEYS, check_override_secrets
from wildtrace.core.tasks import DatasetError
from wildtrace.exitcodes import ArgumentParser, ExitCode, error
from wildtrace.providers.registry import PROVIDERS
from wildtrace.runtime.store.cache import StorageError
from wildtrace.runtime.net.secrets import MissingKeyError
from wildtrace.files import file_kind

log = logging.getLogger("wildtrace.paper")
#: Errors a step reports as bad input (exit 2): raised before any request is sent.
BAD_INPUT = (ConfigError, DatasetError, MissingKeyError, StorageError)

#: The one variable holding the bearer token for every endpoint (spec §6).
API_KEY_ENV = "API_KEY"
#: config.json is a local file, but still outside bytes: read at most this much.
MAX_CONFIG_BYTES = 1_000_000
#: config.json's keys (README: "The paper's two-step workflow").
TOP_KEYS = ("base_url", "model", "provider", "caps", "send_temperature", "reasoning", "max_tokens", "temperature",
            "judges")
JUDGE_KEYS = ("name", "model", "route", "base_url", "provider", "send_temperature")
#: The spec's default caps for a new or unlisted model (§3), as conf/model/custom.yaml has them.
DEFAULT_CAPS_KEY = "default"


@dataclass(frozen=True)
class Judge:
    """One judge of config.json."""

    #: The panel key (``judge_panel.judges.<key>``), derived from the name.
    key: str
    #: Display name (the judge's ``name``, else its route).
    name: str
    #: The model id sent to the endpoint (``model`` or ``route`` in config.json).
    route: str
    #: The endpoint (the judge's ``base_url``, else the top-level one).
    base_url: str
    #: Wire format: openai (default), anthropic, gemini.
    provider: str
    #: False for a judge that rejects temperature; None leaves the judge default (sent).
    send_temperature: bool | None


@dataclass(frozen=True)
class PaperConfig:
    """config.json, checked: the model under test and the panel."""

    #: The endpoint's base URL (OpenAI-compatible ``…/v1`` for provider openai).
    base_url: str
    #: The model id sent to the endpoint.
    model: str
    #: Wire format of the model's endpoint.
    provider: str
    #: (en, cjk) caps in characters, or None: the spec's table row for this model if there is one, else the default.
    caps: tuple[int, int] | None
    #: None: the table row's value, else true.
    send_temperature: bool | None
    #: None: the table row's value, else false.
    reasoning: bool | None
    #: Completion budget; None: 32768 for reasoning models, else 8192 (spec §2).
    max_tokens: int | None
    #: Answer temperature; None: the spec's 0.1.
    temperature: float | None
    #: The judges, in config order (may be empty for the eval step).
    judges: tuple[Judge, ...]


# ---------------------------------------------------------------------------------------------
# config.json → PaperConfig (pure; every error names the key)

def _unknown(keys: Sequence[str], valid: Sequence[str], where: str) -> None:
    """Reject keys config.json does not define, naming the nearest valid one."""
    for key in keys:
        if key not in valid:
            near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (valid: {', '.join(valid)})"
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")


def _typed(data: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, required: bool = False) -> Any:
    """``data[key]`` checked against ``kinds`` (bool is not a number here); None when absent and optional."""
    value = data.get(key)
    if value is None:
        if required:
            raise ConfigError(f"{where}.{key} is required")
        return None
    numeric = any(k in (int, float) for k in kinds)
    if not isinstance(value, kinds) or (numeric and isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ConfigError(f"{where}.{key} must be {names}, got {type(value).__name__} {value!r}"[:300])
    if isinstance(value, str) and not value.strip():
        raise ConfigError(f"{where}.{key} must not be empty")
    return value


def _provider(data: Mapping[str, Any], where: str) -> str:
    provider = _typed(data, "provider", (str,), where) or "openai"
    if provider not in PROVIDERS:
        raise ConfigError(f"{where}.provider: unknown provider {provider!r} (choose from {', '.join(PROVIDERS)})")
    return provider


def _cap_pair(value: Any, where: str) -> tuple[int, int]:
    """``{"en": N, "cjk": M}`` as positive ints."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be an object {{\"en\": …, \"cjk\": …}}")
    _unknown(list(value), ("en", "cjk"), where)
    en, cjk = (_typed(value, k, (int,), where, required=True) for k in ("en", "cjk"))
    if en < 1 or cjk < 1:
        raise ConfigError(f"{where}: caps must be positive character counts")
    return en, cjk


def parse_caps(value: Any, model: str) -> tuple[int, int] | None:
    """``caps``: a pair for this model, or a table keyed by model (with an optional ``default`` row)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError("config.caps must be {\"en\": …, \"cjk\": …} or a table keyed by model")
    if set(value) <= {"en", "cjk"}:
        return _cap_pair(value, "config.caps")
    row = value.get(model, value.get(DEFAULT_CAPS_KEY))
    return None if row is None else _cap_pair(row, f"config.caps.{model if model in value else DEFAULT_CAPS_KEY}")


def judge_key(name: str, taken: set[str]) -> str:
    """A panel key from a judge's name: lower case, [A-Za-z0-9_-] only, unique."""
    key = re.sub(r"[^a-z0-9_-]+", "_", name.lower()).strip("_") or "judge"
    unique, n = key, 2
    # "lexical" is the base entry the overrides remove; "model" is the model's own endpoint
    while unique in taken or unique == "lexical" or unique in RESERVED_JUDGE_KEYS:
        unique, n = f"{key}_{n}", n + 1
    taken.add(unique)
    assert JUDGE_KEY.match(unique)
    return unique


def parse_judges(value: Any, base_url: str) -> tuple[Judge, ...]:
    """``judges``: a list of {name, model|route, base_url, provider} (or an object of them keyed by name)."""
    if value is None:
        return ()
    items = [{"name": k, **v} if isinstance(v, Mapping) else v for k, v in value.items()] \
        if isinstance(value, Mapping) else value
    if not isinstance(items, list):
        raise ConfigError("config.judges must be a list of {name, model, base_url, provider}")
    taken: set[str] = set()
    judges = []
    for i, item in enumerate(items):
        where = f"config.judges[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where} must be an object {{name, model, base_url, provider}}")
        _unknown(list(item), JUDGE_KEYS, where)
        route = _typed(item, "model", (str,), where) or _typed(item, "route", (str,), where)
        if not route:
            raise ConfigError(f"{where}.model (or .route) is required: the judge's model id")
        name = _typed(item, "name", (str,), where) or route
        judges.append(Judge(key=judge_key(name, taken), name=name, route=route,
                            base_url=_typed(item, "base_url", (str,), where) or base_url,
                            provider=_provider(item, where),
                            send_temperature=_typed(item, "send_temperature", (bool,), where)))
    return tuple(judges)


def parse_config(data: Any) -> PaperConfig:
    """A decoded config.json, checked key by key."""
    if not isinstance(data, Mapping):
        raise ConfigError("config.json must hold a JSON object")
    _unknown(list(data), TOP_KEYS, "config")
    base_url = _typed(data, "base_url", (str,), "config", required=True)
    model = _typed(data, "model", (str,), "config", required=True)
    max_tokens = _typed(data, "max_tokens", (int,), "config")
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError(f"config.max_tokens must be positive or null, got {max_tokens}")
    temperature = _typed(data, "temperature", (int, float), "config")
    return PaperConfig(base_url=base_url, model=model, provider=_provider(data, "config"),
                       caps=parse_caps(data.get("caps"), model),
                       send_temperature=_typed(data, "send_temperature", (bool,), "config"),
                       reasoning=_typed(data, "reasoning", (bool,), "config"), max_tokens=max_tokens,
                       temperature=None if temperature is None else float(temperature),
                       judges=parse_judges(data.get("judges"), base_url))


def read_config(path: Path) -> PaperConfig:
    """Read and check config.json (bounded); errors name the file and the key."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config.json")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})"[:400]) from None
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# PaperConfig → Hydra overrides (pure)

def quote(value: str) -> str:
    """A Hydra override value that reads back as exactly ``value`` (quotes, backslashes, ``${`` escaped)."""
    value = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)
    return "'" + value.replace("'", "\\'").replace("${", "\\${") + "'"


def _bool(value: bool) -> str:
    return "true" if value else "false"


@dataclass(frozen=True)
class TableRow:
    """What the spec's caps table (conf/model/*.yaml) says about a known model."""

    #: The model file's name (``model=<file>``).
    file: str
    #: (en, cjk) caps.
    caps: tuple[int, int]
    #: Whether it takes temperature.
    send_temperature: bool
    #: Whether it is a reasoning model.
    reasoning: bool
    #: The budget field its own provider reads.
    budget_field: str
    #: That provider.
    provider: str


def model_overrides(cfg: PaperConfig, row: TableRow | None) -> list[str]:
    """``model=custom`` and every model field, from config.json, else the table's row, else custom's defaults."""
    out = ["model=custom", f"model.name={quote(cfg.model)}", f"model.route={quote(cfg.model)}",
           f"model.base_url={quote(cfg.base_url)}", f"model.provider={cfg.provider}",
           f"model.api_key_env={API_KEY_ENV}"]
    caps = cfg.caps or (row.caps if row else None)
    if caps:
        out += [f"model.caps.en={caps[0]}", f"model.caps.cjk={caps[1]}"]
    send_temperature = cfg.send_temperature if cfg.send_temperature is not None else (row and row.send_temperature)
    reasoning = cfg.reasoning if cfg.reasoning is not None else (row and row.reasoning)
    if send_temperature is not None:
        out.append(f"model.send_temperature={_bool(bool(send_temperature))}")
    if reasoning is not None:
        out.append(f"model.reasoning={_bool(bool(reasoning))}")
    if row and row.provider == cfg.provider and row.budget_field != "max_tokens":
        out.append(f"model.budget_field={row.budget_field}")  # e.g. OpenAI's reasoning models
    if cfg.temperature is not None:
        out.append(f"decoding.temperature={cfg.temperature!r}")
    if cfg.max_tokens is not None:
        out.append(f"decoding.max_tokens={cfg.max_tokens}")
    return out


def panel_overrides(judges: Sequence[Judge]) -> list[str]:
    """The judges as a panel of their own: each added from the judge group, then every field set."""
    if not judges:
        return []
    out = ["judge_panel=offline", "~judge_panel.judges.lexical",
           f"judge_panel.name={quote('+'.join(j.name for j in judges))}"]
    for j in judges:
        at = f"judge_panel.judges.{j.key}"
        out += [f"+judge@{at}=lexical", f"{at}.name={quote(j.name)}", f"{at}.provider={j.provider}",
                f"{at}.route={quote(j.route)}", f"{at}.base_url={quote(j.base_url)}", f"{at}.api_key_env={API_KEY_ENV}"]
        if j.send_temperature is not None:
            out.append(f"{at}.send_temperature={_bool(j.send_temperature)}")
    return out


def dataset_overrides(data: Path, corpus: Path) -> list[str]:
    """The release files given on the command line, as ``dataset=wildtrace`` with its two paths."""
    return ["dataset=wildtrace", f"dataset.tasks={quote(str(data))}", f"dataset.corpus={quote(str(corpus))}"]


def build_overrides(cfg: PaperConfig, row: TableRow | None, data: Path, corpus: Path, stage: str,
                    responses: Path | None = None) -> list[str]:
    """Every override of one step; the two steps differ only in ``stage`` and ``responses``."""
    out = model_overrides(cfg, row) + panel_overrides(cfg.judges) + dataset_overrides(data, corpus)
    out.append(f"stage={stage}")
    if responses is not None:
        out.append(f"responses={quote(str(responses))}")
    return out


# ---------------------------------------------------------------------------------------------
# The steps (I/O: the config tree, the run, the --out files)

def table_row(model: str, conf_dir: Path) -> TableRow | None:
    """The conf/model file whose name or route is this model (dates and gateway prefixes aside), if any."""
    from omegaconf import DictConfig, OmegaConf

    from wildtrace.config.checks import model_identity

    wanted = model_identity(model)
    for path in sorted((conf_dir / "model").glob("*.yaml")):
        node = cast(DictConfig, OmegaConf.load(path))  # a conf/model file is a mapping, never a list
        if path.stem == "custom" or wanted not in {model_identity(str(node.get("name"))),
                                                   model_identity(str(node.get("route")))}:
            continue
        caps = node.get("caps") or {}
        return TableRow(file=path.stem, caps=(int(caps["en"]), int(caps["cjk"])),
                        send_temperature=bool(node.get("send_temperature", True)),
                        reasoning=bool(node.get("reasoning", False)),
                        budget_field=str(node.get("budget_field", "max_tokens")), provider=str(node.get("provider")))
    return None


def compose(overrides: list[str]) -> tuple[Any, Path]:
    """Compose conf/config.yaml as the app does; the job config and the run directory Hydra would use."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict

    from wildtrace.app import CONF_DIR

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except HydraException as exc:
        raise ConfigError(f"the overrides built from config.json do not compose: {exc}"[:1000]) from None
    run_dir = Path(OmegaConf.select(cfg, "hydra.run.dir")).resolve()
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, run_dir


def save_hydra_files(cfg: Any, overrides: list[str], run_dir: Path) -> None:
    """``.hydra/config.yaml`` and ``overrides.yaml``, as a Hydra job leaves them (logged to MLflow with the run)."""
    from omegaconf import OmegaConf

    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, hydra_dir / "config.yaml", resolve=False)
    OmegaConf.save(OmegaConf.create(overrides), hydra_dir / "overrides.yaml")


def job_logging(run_dir: Path) -> logging.Handler:
    """Process messages to stderr and to ``<run dir>/app.log``, as the Hydra app's job log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler) for h in root.handlers):
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(fmt)
        root.addHandler(console)
    file_handler = logging.FileHandler(run_dir / "app.log", encoding="utf-8")
    file_handler.setFormatter(fmt)
    root.addHandler(file_handler)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return file_handler


def copy_out(src: Path, out: Path) -> Path:
    """Copy a run file to ``--out`` (parents made, replaced atomically)."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(out)
    return out


def run_step(config: Path, data: Path, corpus: Path, stage: str, responses: Path | None = None) -> Any:
    """One step: config.json → overrides → compose → prepare → run, in a run directory of its own."""
    from wildtrace.app import (CONF_DIR, discard_rejected, missing_folders, name_command, observer_for, prepare,
                               route_console_to_stderr, show_headline)
    from wildtrace.runtime.run.execute import run

    cfg = read_config(config)
    row = table_row(cfg.model, Path(CONF_DIR))
    overrides = build_overrides(cfg, row, data, corpus, stage, responses)
    check_override_secrets(overrides)  # a key in config.json's URLs: refused before the run folder is made
    dict_cfg, run_dir = compose(overrides)
    made = missing_folders(run_dir)
    handler = job_logging(run_dir)
    route_console_to_stderr()
    try:
        if row and not cfg.caps:
            log.info("caps for %s from the spec's table (conf/model/%s.yaml): en %d, cjk %d",
                     cfg.model, row.file, *row.caps)
        try:
            settings = prepare(dict_cfg)
            settings.out_dir = str(run_dir)
            save_hydra_files(dict_cfg, overrides, run_dir)
            name_command(settings, overrides)
            result = run(settings, overrides=overrides, observer=observer_for(settings))
        except BAD_INPUT:
            discard_rejected(run_dir, made)  # refused before anything ran: no folder that looks like a run
            raise
        show_headline(result)
        return result
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def _path(text: str) -> Path:
    path = Path(text).expanduser()
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop, a name too long: check_paths names the flag
        return path.absolute()


def check_paths(config: Path, data: Path, corpus: Path | None, out: Path, responses: Path | None = None) -> None:
    """Every flag's path checked before anything runs, naming the flag (exit 2, no traceback).

    A FIFO given as --config would block the read forever, and a directory given as --out
    used to fail only after the run had paid for every answer.
    """
    from wildtrace.core.tasks import DatasetError
    from wildtrace.runtime.store.cache import check_writable
    from wildtrace.runtime.store.dataset import input_file, input_folder

    try:
        input_file(config, "--config", "config file")
        input_file(data, "--data", "tasks file")
        if corpus is not None:
            input_folder(corpus, "--corpus", "corpus folder")
        if responses is not None:
            input_file(responses, "--responses", "responses file")
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
    kind = file_kind(out)
    if kind not in (None, "file"):
        raise ConfigError(f"--out: {out} {kind.replace('cannot be read', 'cannot be written')}")
    check_writable(out.parent, "--out: the folder")


def default_corpus(data: Path) -> Path:
    """The release layout (data/…json beside corpus/): ``<data>/../../corpus``, else ``corpus/`` beside the file."""
    for candidate in (data.parent.parent / "corpus", data.parent / "corpus"):
        if candidate.is_dir():
            return candidate
    return data.parent.parent / "corpus"


def _parser(prog: str, judge: bool) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=prog, description=(
        f"{prog} (python -m wildtrace.paper {'judge' if judge else 'eval'}): the spec's §6 "
        + ("judge step (run_judge.py)" if judge else "answer step (run_eval.py)")
        + f" on wildtrace's Hydra config; the bearer token is read from ${API_KEY_ENV}."))
    parser.add_argument("--config", type=_path, required=True, help="config.json (README: the paper's workflow)")
    parser.add_argument("--data", type=_path, required=True, help="the tasks file, e.g. data/wildtrace_strict481"
                        ".with_answers.json")
    parser.add_argument("--corpus", type=_path, required=not judge, default=None,
                        help="the corpus folder" + (" (default: corpus/ of the release the data file is in)"
                                                    if judge else ""))
    if judge:
        parser.add_argument("--responses", type=_path, required=True, help="the eval step's --out file")
    parser.add_argument("--out", type=_path, required=True,
                        help="where to write the " + ("scores (overall = All view, %%)" if judge else "responses"))
    return parser


def _finish(prog: str, step: Any) -> int:
    """Run a step; configuration, dataset and key errors exit 2 with one line, before any request."""
    try:
        return step()
    except BAD_INPUT as exc:
        error(prog, exc)
        return ExitCode.BAD_INPUT


def eval_main(argv: list[str] | None = None) -> int:
    """``wildtrace-eval --config --data --corpus --out``: answers only; ``--out`` gets responses.json."""
    args = _parser("wildtrace-eval", judge=False).parse_args(argv)

    def step() -> int:
        check_paths(args.config, args.data, args.corpus, args.out)
        result = run_step(args.config, args.data, args.corpus, "answer")
        out = copy_out(result.out_dir / "responses.json", args.out)
        c = result.outcome.counters
        print(f"responses: {out} (answered {c.answered}, failed {c.failed}, out of context {c.out_of_context})")
        return result.exit_code

    return _exit(_finish("wildtrace-eval", step), argv)


def judge_main(argv: list[str] | None = None) -> int:
    """``wildtrace-judge --config --data --responses --out``: judging only; ``--out`` gets scores.json."""
    args = _parser("wildtrace-judge", judge=True).parse_args(argv)

    def step() -> int:
        corpus = args.corpus or default_corpus(args.data)
        check_paths(args.config, args.data, corpus, args.out, args.responses)
        result = run_step(args.config, args.data, corpus, "judge", args.responses)
        out = copy_out(result.out_dir / "scores.json", args.out)
        overall = result.summary["overall"]
        print(f"overall: {'n/a' if overall is None else f'{overall:.2f}%'} (All view) -> {out}")
        return result.exit_code

    return _exit(_finish("wildtrace-judge", step), argv)


def _exit(code: int, argv: list[str] | None) -> int:
    """Console scripts exit with the code; a call with explicit argv (tests, embedding) gets it returned."""
    if argv is None:
        sys.exit(code)
    return code


#: ``python -m wildtrace.paper --help``: what the command is, then its two steps.
HELP = f"""wildtrace.paper: the spec's two-step CLI (§6: run_eval.py, run_judge.py) on wildtrace's Hydra config.
A config.json names the model, its base URL and the judges; the bearer token is read from ${API_KEY_ENV}.

usage: python -m wildtrace.paper {{eval,judge}} ...
  eval   --config config.json --data TASKS --corpus CORPUS --out responses.json   answers only
  judge  --config config.json --data TASKS --responses responses.json --out scores.json   judging only

The same steps are the wildtrace-eval and wildtrace-judge commands; `python -m wildtrace.paper eval --help`
lists a step's flags (docs/experiments/paper-cli.md). Exit 0 done, 1 the run failed, 2 bad input."""


def main(argv: list[str] | None = None) -> int:
    """``python -m wildtrace.paper eval|judge …`` (``--help``: what it is, exit 0)."""
    argv = sys.argv[1:] if argv is None else argv
    steps = {"eval": eval_main, "judge": judge_main}
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP)
        return ExitCode.OK
    if not argv or argv[0] not in steps:
        error("wildtrace.paper", "usage: python -m wildtrace.paper {eval,judge} --config config.json … "
              "(--help says more)")
        return ExitCode.BAD_INPUT
    return steps[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
