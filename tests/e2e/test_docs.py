"""The docs say what the code does: the configuration reference is the schemas' own text."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_configuration_reference_is_current_and_every_field_documented():
    """docs/reference/configuration-reference.md is generated from wildtrace/config/__init__.py's ``#:`` comments."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "config_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr



def test_the_architecture_page_names_every_module():
    """docs/extending/architecture.md's layout names each package, module, test server and benchmark that
    exists, so a module added or moved shows up there (the names only; what each does is the page's)."""
    page = (ROOT / "docs" / "extending" / "architecture.md").read_text(encoding="utf-8")
    layout = page.split("```", 2)[1]
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", layout))
    files = [*(ROOT / "wildtrace").rglob("*.py"), *(ROOT / "tests" / "servers").glob("*.py"),
             *(ROOT / "benchmarks").glob("*.py")]
    names = {f.stem for f in files if f.stem not in ("__init__", "__main__")}
    names |= {d.name for d in (ROOT / "wildtrace").rglob("*") if d.is_dir() and (d / "__init__.py").exists()}
    assert sorted(names - words) == []


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them (lower case, punctuation
    dropped, spaces as hyphens, ``-1``, ``-2`` after a repeated heading)."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_every_link_between_the_docs_resolves():
    """A rule lives on one page and the others link to it: every relative link of README.md,
    CHANGELOG.md and docs/ names a file that exists and, with a #fragment, a heading on it."""
    broken = []
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, fragment = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists() or (fragment and dest.suffix == ".md" and fragment not in _anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []

# --- every command in the README and docs/ parses ----------------------------------------------

import shlex  # noqa: E402

import pytest  # noqa: E402

#: Entry points that are Hydra apps, and the config each composes.
HYDRA_APPS = {"wildtrace": "config", "wildtrace.check": "check", "wildtrace.estimate": "estimate",
              "wildtrace.probe": "probe", "wildtrace.report": "report"}
#: Entry points with argparse flags.
ARGPARSE_APPS = ("wildtrace.upload", "wildtrace.download", "wildtrace.paper")
#: Placeholders a reader fills in (the command is shown, not runnable as written).
PLACEHOLDERS = ("…", "...", "$", "model=my-model")


def doc_commands() -> list[tuple[str, str]]:
    """(file, command) for every ``python -m wildtrace…`` line of a bash block in README.md and docs/."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                for part in re.split(r"&&|;", line):
                    if part.strip().startswith("python -m wildtrace"):
                        out.append((path.relative_to(ROOT).as_posix(), part.strip()))
    return out


def _sweep(value: str) -> list[str]:
    """A Hydra sweep's choices (``a,b,c``); one value otherwise (brackets and quotes kept whole)."""
    if any(c in value for c in "[]()'\"{}") or "," not in value:
        return [value]
    return value.split(",")


def _variants(overrides: list[str]) -> list[list[str]]:
    """The overrides with every sweep at its first choice, then each other choice of each sweep."""
    split = [(o.split("=", 1)[0], _sweep(o.split("=", 1)[1])) if "=" in o else (o, [None]) for o in overrides]
    first = [o if v[0] is None else f"{k}={v[0]}" for o, (k, v) in zip(overrides, split, strict=True)]
    out = [first]
    for i, (k, values) in enumerate(split):
        for v in values[1:]:
            out.append([*first[:i], f"{k}={v}", *first[i + 1:]])
    return out


def test_the_docs_show_commands():
    found = doc_commands()
    pages = {f for f, _ in found}
    assert len(found) > 30 and pages >= {"README.md", "docs/team/team.md", "docs/experiments/reports.md"}


@pytest.mark.parametrize(("where", "command"), [c for c in doc_commands()
                                                if shlex.split(c[1], comments=True)[2] in HYDRA_APPS])
def test_a_documented_hydra_command_composes(where, command):
    """Its overrides compose against the app's own config (a typo'd key or group fails here)."""
    from hydra import compose, initialize_config_dir

    from wildtrace.app import CONF_DIR
    from wildtrace.config import register
    from wildtrace.config.checks import check_known_keys, check_overrides

    import importlib

    from omegaconf import open_dict

    tokens = shlex.split(command, comments=True)
    module, args = tokens[2], [t for t in tokens[3:] if t not in ("-m", "--multirun")]
    # A reader's placeholder, or a sweep Hydra expands only in a multirun (glob, range), is left out.
    args = [a for a in args if not any(p in a for p in PLACEHOLDERS) and "=glob(" not in a and "=range(" not in a]
    if "hydra/launcher=ray_cluster" in args and importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
        pytest.skip("hydra-ray-launcher is not installed (docs/team/team.md)")
    register()
    importlib.import_module({"wildtrace.report": "wildtrace.report.app"}.get(module, module))  # its schema
    for overrides in _variants(args):
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name=HYDRA_APPS[module], overrides=overrides,
                          return_hydra_config=any(o.startswith("hydra") for o in overrides))
        if HYDRA_APPS[module] in ("config", "check", "estimate"):
            check_overrides(overrides)
            with open_dict(cfg):
                cfg.pop("hydra", None)
            check_known_keys(cfg)


@pytest.mark.parametrize("module", ARGPARSE_APPS)
def test_the_flags_the_docs_give_an_argparse_command_exist(module):
    """Every ``--flag`` a documented command passes is one its ``--help`` lists."""
    flags = {t.split("=")[0] for _, c in doc_commands() if shlex.split(c, comments=True)[2] == module
             for t in shlex.split(c.replace("[", " ").replace("]", " "), comments=True) if t.startswith("--")}
    helps = [subprocess.run([sys.executable, "-m", module, *sub, "--help"], capture_output=True, text=True, timeout=120)
             for sub in ([["eval"], ["judge"]] if module == "wildtrace.paper" else [[]])]
    assert all(h.returncode == 0 for h in helps), [h.stderr[-2000:] for h in helps]
    text = "".join(h.stdout for h in helps)
    assert not [f for f in flags if f not in text], (flags, text[-3000:])
