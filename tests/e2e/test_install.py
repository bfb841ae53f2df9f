"""Install anywhere: a wheel carries conf/, a non-editable install runs from any folder, editable still works.

Each test builds from a copy of this checkout (so no build/ or egg-info lands in the tree),
into a fresh venv that sees the running venv's site-packages through a .pth file: no network,
no dependency download, and none of the running venv's own wildtrace (a .pth inside an added
directory is not processed, so its editable hook stays inactive).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from wildtrace.app import find_conf_dir

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "wildtrace", "conf")


def copy_checkout(dest: Path) -> Path:
    """The files a build reads, copied without caches."""
    dest.mkdir(parents=True)
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def fresh_venv(path: Path) -> Path:
    """A venv without pip that borrows this interpreter's site-packages (deps, pip) after its own; its python."""
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    Path(own, "_borrowed_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "WILDTRACE_DATA_DIR")}
    env.update(extra)
    return env


def pip(python: Path, *args: str, cwd: Path) -> None:
    """Run pip (borrowed) with the fresh venv's interpreter, offline."""
    proc = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                          env=clean_env(PIP_NO_INDEX="1"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def where_is_conf(python: Path, cwd: Path) -> Path:
    """The config tree the installed app resolves."""
    proc = subprocess.run([str(python), "-c", "import wildtrace.app as a; print(a.CONF_DIR)"], cwd=cwd,
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


@pytest.mark.slow
def test_wheel_carries_conf_and_runs_the_default_job_from_another_folder(tmp_path: Path) -> None:
    """pip wheel → install into a fresh venv → `python -m wildtrace` in an unrelated folder: exit 0, headline."""
    src = copy_checkout(tmp_path / "src")
    python = fresh_venv(tmp_path / "venv")
    pip(python, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), ".", cwd=src)
    wheel = next((tmp_path / "dist").glob("wildtrace-*.whl"))
    pip(python, "install", "--no-deps", str(wheel), cwd=tmp_path)
    shutil.rmtree(src)  # nothing may still be read from the source tree

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    conf = where_is_conf(python, elsewhere)
    assert conf.parts[-2:] == ("wildtrace", "conf") and (tmp_path / "venv") in conf.parents
    assert {p.name for p in conf.iterdir()} >= {"config.yaml", "model", "judge", "judge_panel", "dataset", "decoding"}
    assert sorted(p.name for p in (conf / "model").glob("*.yaml")) == sorted(
        p.name for p in (REPO / "conf" / "model").glob("*.yaml"))

    proc = subprocess.run([str(python), "-m", "wildtrace", "progress=false"], cwd=elsewhere, env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "overall (All view): 28.25%" in proc.stdout
    assert f"run dir: {elsewhere / 'outputs' / 'runs'}" in proc.stdout
    assert "mlflow: run " in proc.stdout
    runs = list((elsewhere / "outputs" / "runs").glob("*/*/scores.json"))
    assert len(runs) == 1 and (runs[0].parent / ".hydra" / "config.yaml").is_file()

    script = tmp_path / "venv" / "bin" / "wildtrace"  # the console script works the same
    proc = subprocess.run([str(script), "mlflow.enabled=false", "progress=false", "dataset.limit=2"], cwd=elsewhere,
                          env=clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "of 2" in proc.stdout, proc.stderr
    for name in ("wildtrace-eval", "wildtrace-judge"):  # the paper's two steps are installed too
        proc = subprocess.run([str(tmp_path / "venv" / "bin" / name), "--help"], cwd=elsewhere, env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "--config" in proc.stdout and "--out" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_editable_install_reads_the_top_level_conf(tmp_path: Path) -> None:
    """`pip install -e .` keeps working: the app reads conf/ at the checkout's top level."""
    src = copy_checkout(tmp_path / "src")
    python = fresh_venv(tmp_path / "venv")
    pip(python, "install", "--no-deps", "--no-build-isolation", "-e", ".", cwd=src)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert where_is_conf(python, elsewhere) == src / "conf"
    assert not (src / "wildtrace" / "conf").exists()


@pytest.mark.parametrize("layout, expected", [
    ("installed", "pkg/conf"),   # wheel: wildtrace/conf inside the package
    ("checkout", "conf"),        # clone or editable: conf/ beside the package
    ("both", "pkg/conf"),        # the installed copy wins: it is the one built with this code
])
def test_find_conf_dir_prefers_the_packaged_tree(tmp_path: Path, layout: str, expected: str) -> None:
    """The two places a config tree can be, table-driven."""
    package = tmp_path / "pkg"
    package.mkdir()
    for where in {"installed": ["pkg/conf"], "checkout": ["conf"], "both": ["pkg/conf", "conf"]}[layout]:
        (tmp_path / where).mkdir(parents=True)
        (tmp_path / where / "config.yaml").write_text("defaults: []\n")
    assert find_conf_dir(package) == tmp_path / expected


def test_find_conf_dir_names_both_places_when_missing(tmp_path: Path) -> None:
    """No tree anywhere: a clear error, not Hydra's 'primary config not found' later."""
    with pytest.raises(FileNotFoundError, match=r"conf/config\.yaml"):
        find_conf_dir(tmp_path / "pkg")


def test_pyproject_declares_the_console_scripts() -> None:
    """The paper's two-step scripts are console scripts next to the app's."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["wildtrace-eval"] == "wildtrace.paper:eval_main"
    assert scripts["wildtrace-judge"] == "wildtrace.paper:judge_main"
    assert scripts["wildtrace"] == "wildtrace.app:main"
