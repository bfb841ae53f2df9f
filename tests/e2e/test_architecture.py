"""The layers stay one-way, checked on the package's own imports (function-level ones too).

core/ and offline/ are pure (no I/O library, no other layer but core); providers speak wire
formats only (core, and offline/ for the offline provider); runtime never imports tracking, report or the entry points,
and its concerns (store, spend, net, batch, run, checks) import downwards only;
tracking never imports runtime; only tracking/ and report/ import MLflow; no module imports
itself back through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "wildtrace"
FORBIDDEN = {"httpx", "mlflow", "hydra", "omegaconf", "tqdm", "huggingface_hub", "os", "pathlib", "socket",
             "asyncio", "requests", "urllib", "subprocess", "shutil", "tempfile", "io"}
PURE = sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "offline").glob("*.py"))
#: layer → the wildtrace layers it may import (besides itself).
#: providers may reach offline/ too: the offline provider's wire format IS the pure baseline and judge.
ALLOWED = {"core": {"core"}, "offline": {"core", "offline"}, "providers": {"core", "offline", "providers"}}
#: layer → wildtrace layers it must never import.
NEVER = {"runtime": {"tracking", "report", "app", "upload"}, "tracking": {"runtime", "app"}}


def module_name(path: Path, root: Path) -> str:
    """wildtrace/core/views.py → wildtrace.core.views (a package's __init__ is the package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> list[str]:
    """Every module name ``path`` imports, anywhere in the file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found += [base] + [f"{base}.{alias.name}" for alias in node.names]  # `from a import b` may be module a.b
    return found


def graph(root: Path) -> dict[str, set[str]]:
    """Module → the package's own modules it imports."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    return {name: {m for m in imports_of(path, root) if m in modules and m != name} for name, path in modules.items()}


def layer(module: str) -> str:
    """wildtrace.runtime.run.execute → runtime; wildtrace.app → app."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    """Every import that goes against the layer order, as "a -> b"."""
    bad = []
    for source, targets in edges.items():
        for target in targets:
            src, dst = layer(source), layer(target)
            if dst == "wildtrace":  # the package root (its version) is fine for everyone
                continue
            if (src in ALLOWED and dst not in ALLOWED[src]) or dst in NEVER.get(src, set()):
                bad.append(f"{source} -> {target}")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles (strongly connected components of more than one module), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def imported_roots(path: Path) -> set[str]:
    """Top-level names of the absolute imports of a file."""
    return {m.split(".")[0] for m in imports_of(path, PACKAGE) if m}


@pytest.mark.parametrize("path", PURE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pure_modules_import_no_io(path):
    assert not imported_roots(path) & FORBIDDEN
    assert "open(" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted((PACKAGE / "providers").rglob("*.py")),
                         ids=lambda p: p.relative_to(PACKAGE / "providers").as_posix())
def test_providers_only_speak_wire_formats(path):
    """Wire, stream, batch and model-list formats alike: no I/O (runtime/ sends, spools and reads)."""
    assert not imported_roots(path) & (FORBIDDEN - {"io"})
    assert "open(" not in path.read_text(encoding="utf-8")


def test_only_tracking_and_report_import_mlflow():
    users = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if "mlflow" in imported_roots(p)}
    assert {u.split("/")[0] for u in users} <= {"tracking", "report"}, users


#: MLflow's documented modules; anything else (``mlflow.tracing.client``, ``mlflow.store`` ...) is
#: reached through ``tracking/mlflow_compat.py`` only, where each use says why and what to check on an upgrade.
MLFLOW_DOCUMENTED = ("mlflow", "mlflow.entities", "mlflow.tracking", "mlflow.exceptions")


def test_only_mlflow_compat_reaches_past_mlflows_documented_api():
    def undocumented(path: Path) -> list[str]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level]
        return [m for m in names if m.split(".")[0] == "mlflow" and m not in MLFLOW_DOCUMENTED]

    found = {p.relative_to(PACKAGE).as_posix(): undocumented(p) for p in PACKAGE.rglob("*.py")}
    assert {path: names for path, names in found.items() if names and path != "tracking/mlflow_compat.py"} == {}


def test_layers_are_one_way():
    assert layer_violations(graph(PACKAGE)) == []


#: runtime/'s concerns, lowest first: each imports only the ones before it (a store knows no HTTP, the
#: HTTP stack no run, a run no check).
RUNTIME_ORDER = ("store", "spend", "net", "batch", "run", "checks")
#: The most lines one package's own modules may hold (its subpackages count on their own).
PACKAGE_LINES = 2500


def concern(module: str) -> str | None:
    """wildtrace.runtime.net.call → net; None outside runtime/'s concerns."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "runtime" else None


def concern_violations(edges: dict[str, set[str]]) -> list[str]:
    """Every import from one runtime concern into a later one (or one not in the order), as "a -> b"."""
    rank = {name: i for i, name in enumerate(RUNTIME_ORDER)}
    bad = []
    for source, targets in edges.items():
        for target in targets:
            src, dst = concern(source), concern(target)
            if src and dst and src != dst and rank.get(dst, len(rank)) > rank.get(src, -1):
                bad.append(f"{source} -> {target}")
    return sorted(bad)


def test_runtime_concerns_import_downwards():
    assert concern_violations(graph(PACKAGE)) == []


def test_runtime_is_its_concerns():
    """Every runtime module sits in one of the concerns; nothing is left at runtime/'s top."""
    runtime = PACKAGE / "runtime"
    assert [p.name for p in runtime.glob("*.py")] == ["__init__.py"]
    assert {p.name for p in runtime.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(RUNTIME_ORDER)


def test_no_package_is_above_its_size():
    sizes = {d.relative_to(PACKAGE.parent).as_posix(): sum(len(p.read_text(encoding="utf-8").splitlines())
                                                           for p in d.glob("*.py"))
             for d in [PACKAGE, *PACKAGE.rglob("*")] if d.is_dir() and d.name != "__pycache__"}
    assert {d: n for d, n in sizes.items() if n > PACKAGE_LINES} == {}


def test_the_concern_check_catches_an_upward_import(tmp_path):
    pkg = write_package(tmp_path, {"runtime/store/cache.py": "from wildtrace.runtime.net import call\n",
                                   "runtime/net/call.py": "from wildtrace.runtime.store import cache\n"})
    assert concern_violations(graph(pkg)) == ["wildtrace.runtime.store.cache -> wildtrace.runtime.net.call"]


def test_no_import_cycles():
    assert cycles(graph(PACKAGE)) == []


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A throwaway package named wildtrace under root, for checking the checker."""
    pkg = root / "wildtrace"
    for name, text in {"__init__.py": "", **files}.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text, encoding="utf-8")
    return pkg


@pytest.mark.parametrize(("files", "expected"), [
    ({"runtime/run/execute.py": "def f():\n    from wildtrace.tracking.log import x\n", "tracking/log.py": "x = 1\n"},
     ["wildtrace.runtime.run.execute -> wildtrace.tracking.log"]),  # a function-level back-import
    ({"tracking/log.py": "from ..runtime import pipe\n", "runtime/pipe.py": ""},
     ["wildtrace.tracking.log -> wildtrace.runtime", "wildtrace.tracking.log -> wildtrace.runtime.pipe"]),  # relative
    ({"core/caps.py": "import wildtrace.runtime.store.cache\n", "runtime/store/cache.py": ""},
     ["wildtrace.core.caps -> wildtrace.runtime.store.cache"]),
    ({"providers/openai/batch.py": "from wildtrace.runtime.batch.base import Control\n",
      "runtime/batch/base.py": ""},
     ["wildtrace.providers.openai.batch -> wildtrace.runtime.batch.base"]),  # a format reaching for the I/O
    ({"runtime/run/execute.py": "from wildtrace.core import caps\nfrom wildtrace.files import w\n", "core/caps.py": "",
      "files.py": ""}, []),
])
def test_the_layer_check_catches_back_imports(tmp_path, files, expected):
    assert layer_violations(graph(write_package(tmp_path, files))) == expected


def test_the_cycle_check_catches_a_hidden_cycle(tmp_path):
    pkg = write_package(tmp_path, {"tracking/a.py": "from wildtrace.tracking import b\n",
                                   "tracking/b.py": "def f():\n    from wildtrace.tracking.a import x\n"})
    assert cycles(graph(pkg)) == [["wildtrace.tracking.a", "wildtrace.tracking.b"]]
