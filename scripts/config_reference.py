"""Write docs/reference/configuration-reference.md from the structured-config schemas' own documentation.

Every schema in ``wildtrace/config/__init__.py`` documents its fields with ``#:`` comments above them
(the Sphinx convention); this reads them with ``ast`` and the source lines, so the reference
says exactly what the code says. ``--check`` exits 1 when the committed page is stale or a
field has no documentation (tests/e2e/test_docs.py runs it).

    python scripts/config_reference.py            # rewrite the page
    python scripts/config_reference.py --check    # is it current?
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "wildtrace" / "config" / "__init__.py"
#: Schemas the config uses from the core, by file: the one type of an idea lives where the spec does.
CORE_SCHEMAS = {ROOT / "wildtrace" / "core" / "caps.py": ("Caps",)}
PAGE = ROOT / "docs" / "reference" / "configuration-reference.md"


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    default: str
    doc: str


@dataclass(frozen=True)
class Schema:
    name: str
    doc: str
    fields: tuple[Field, ...]


def _comment_above(lines: list[str], lineno: int) -> str:
    """The ``#:`` comment lines right above line ``lineno`` (1-based), joined."""
    out: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        out.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return " ".join(out)


def _default(node: ast.expr | None) -> str:
    if node is None:
        return "(required)"
    text = ast.unparse(node)
    if text == "MISSING":
        return "(required)"
    if text.startswith("field(default_factory="):
        factory = text.removeprefix("field(default_factory=").removesuffix(")")
        return {"list": "[]", "dict": "{}"}.get(factory, f"{factory}()")
    return text


def schemas(source: Path = SOURCE) -> list[Schema]:
    """Every dataclass of the module, its docstring's first paragraph, and its documented fields."""
    text = source.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for node in ast.parse(text).body:
        if not isinstance(node, ast.ClassDef):
            continue
        if not any(ast.unparse(d).startswith(("dataclass", "dataclasses.dataclass")) for d in node.decorator_list):
            continue
        doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
        fields = tuple(Field(item.target.id, ast.unparse(item.annotation), _default(item.value),
                             _comment_above(lines, item.lineno))
                       for item in node.body
                       if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                       and not item.target.id.startswith("_") and "ClassVar" not in ast.unparse(item.annotation))
        out.append(Schema(node.name, doc, fields))
    return out


def all_schemas() -> list[Schema]:
    """The core's schemas the config uses, then every schema of wildtrace/config/__init__.py."""
    core = [s for path, names in CORE_SCHEMAS.items() for s in schemas(path) if s.name in names]
    return core + schemas()


def render(found: list[Schema]) -> str:
    parts = ["# Configuration reference", "",
             "Generated from the schemas in `wildtrace/config/__init__.py` (and `Caps` in `wildtrace/core/caps.py`) by "
             "`python scripts/config_reference.py`; "
             "a test fails when it is stale. Each run's composed config is the root schema "
             "(`WildtraceConfig`); the groups (`model`, `judge_panel`, `decoding`, `dataset`, `access`) fill "
             "its parts. Override any key on the command line: `python -m wildtrace decoding.temperature=0.4`.", ""]
    for schema in found:
        parts += [f"## `{schema.name}`", "", schema.doc, "", "| key | type | default | what it is |",
                  "|---|---|---|---|"]
        for f in schema.fields:
            cell = f.doc.replace("|", "\\|") or "—"
            default = "required" if f.default == "(required)" else f"`{f.default}`"
            parts.append(f"| `{f.name}` | `{f.type}` | {default} | {cell} |")
        parts.append("")
    return "\n".join(parts)


def undocumented(found: list[Schema]) -> list[str]:
    return [f"{s.name}.{f.name}" for s in found for f in s.fields if not f.doc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale or a field is undocumented")
    args = parser.parse_args(argv)
    found = all_schemas()
    page = render(found)
    missing = undocumented(found)
    if args.check:
        stale = not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page
        if stale:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/config_reference.py", file=sys.stderr)
        if missing:
            print("fields without a #: comment: " + ", ".join(missing), file=sys.stderr)
        return 1 if stale or missing else 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(page, encoding="utf-8")
    if missing:
        print("fields without a #: comment: " + ", ".join(missing), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
