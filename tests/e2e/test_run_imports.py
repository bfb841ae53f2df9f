"""The run's own process computes its headline without pandas.

pandas (with numpy and pyarrow) was about 90 MB of the run process's memory, imported only
for the end-of-run views; ``core.views`` computes them over plain rows. The embedded default
runs in a fresh interpreter (a test session has imported everything long before); MLflow's
logging process imports pandas in its own process, which is not this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import atexit, json, runpy, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(m for m in sys.modules if "." not in m))))
sys.argv = ["wildtrace", "progress=false"]
runpy.run_module("wildtrace", run_name="__main__", alter_sys=True)
"""


def test_the_run_process_never_imports_pandas(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "overall (All view):" in done.stdout  # the run was scored
    modules = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))[8:])
    assert "wildtrace" in modules and "httpx" in modules  # the whole run was in this process
    assert not {"pandas", "numpy", "pyarrow"} & set(modules)
    assert json.loads((next((tmp_path / "outputs" / "runs").rglob("scores.json"))).read_text())["n_scored"] == 10
