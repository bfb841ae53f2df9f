"""The pure core stays pure: no I/O library is imported by core/ or offline/."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "wildtrace"
FORBIDDEN = {"httpx", "mlflow", "hydra", "omegaconf", "tqdm", "huggingface_hub", "os", "pathlib", "socket",
             "asyncio", "requests", "urllib", "subprocess", "shutil", "tempfile", "io"}
PURE = sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "offline").glob("*.py"))


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", PURE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pure_modules_import_no_io(path):
    assert not imported_roots(path) & FORBIDDEN
    assert "open(" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted((PACKAGE / "providers").glob("*.py")), ids=lambda p: p.name)
def test_providers_only_speak_wire_formats(path):
    assert not imported_roots(path) & (FORBIDDEN - {"io"})


def test_only_tracking_and_report_import_mlflow():
    users = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if "mlflow" in imported_roots(p)}
    allowed = {p.relative_to(PACKAGE).as_posix() for room in ("tracking", "report") for p in (PACKAGE / room).glob("*.py")}
    assert users <= allowed
