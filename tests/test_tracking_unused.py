"""Issue 19, item 8: the logging process keeps pyarrow out (about 70 MB of its memory).

pandas loads pyarrow whenever it is installed; the logging process never reads or writes
Arrow data. Each case runs in a fresh interpreter, once as the logging process starts
(``_keep_out_unused``) and once as any other process: MLflow and pandas import in both, and
the run tables the logging process stores are the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import io, json, sys
if sys.argv[1] == "child":
    from wildtrace.tracking.process import _keep_out_unused
    _keep_out_unused()
import mlflow.tracking  # noqa: F401
import pandas as pd
try:
    import pyarrow  # noqa: F401
    arrow = True
except ImportError:
    arrow = False
frame = pd.DataFrame([{"question_id": "q1", "status": "scored", "score": 62.5, "reason": None, "text": "泵 failed"},
                      {"question_id": "q2", "status": "failed", "score": float("nan"), "reason": "http_error",
                       "text": "a \"quoted\" reply"}])
buf = io.StringIO()
frame.to_json(buf, orient="split", index=False, date_format="iso", force_ascii=False)
print(json.dumps({"arrow": arrow, "table": buf.getvalue()}))
"""


def in_fresh_interpreter(role: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, role], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_logging_process_goes_without_pyarrow_and_stores_the_same_tables() -> None:
    child, other = in_fresh_interpreter("child"), in_fresh_interpreter("other")
    assert child["arrow"] is False
    assert child["table"] == other["table"]
    assert json.loads(child["table"])["data"][0] == ["q1", "scored", 62.5, None, "泵 failed"]
