"""A run whose whole process group is killed (SIGKILL to the group, as Slurm or the OOM killer do) leaves a
folder that names its command from before the first request: ``upload`` prints the rerun, with the folder it
ran in, and that rerun finishes the run."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, write_release
from servers.loopback import LoopbackServer
from test_resume import N_TASKS, Gate, command
from wildtrace.runtime.run.execute import resume_command

pytestmark = pytest.mark.slow
KEY = "sk-test-killed-group-0123456789"


def test_a_group_killed_whole_leaves_a_folder_upload_and_a_rerun_can_finish(tmp_path: Path) -> None:
    tasks, corpus = write_release(tmp_path,
                                  [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(N_TASKS)],
                                  {"doc.txt": "The seal was worn. The pump failed at 03:14. " * 30})
    env = {**os.environ, TEST_KEY_ENV: KEY}
    gate = Gate()
    with LoopbackServer(gate.responder) as server:
        cmd = command(Path("out"), server.url, tasks, corpus, tmp_path / "cache")  # a relative root: cwd matters
        first = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 start_new_session=True)
        deadline = time.monotonic() + 120
        while gate.held == 0 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert gate.held > 0, first.communicate()
        os.killpg(first.pid, signal.SIGKILL)  # the whole group: the run and any process it started
        first.wait(timeout=60)
        first.stderr.close()
        gate.release.set()
        gate.closed = False

        (run_dir,) = (tmp_path / "out" / "runs").glob("*/*")
        named = json.loads((run_dir / "command.json").read_text())
        overrides = cmd[3:]
        assert named["command"] == resume_command(overrides) and named["overrides"] == overrides
        assert named["cwd"] == str(tmp_path)
        assert named["config"]["model"]["route"] == "test-model"
        assert named["config"]["cache"]["dir"] == str(tmp_path / "cache")
        assert not (run_dir / "config.json").exists()
        assert all(KEY not in p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())

        up = subprocess.run([sys.executable, "-m", "wildtrace.upload", str(run_dir)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path.parent)
        assert up.returncode == 2, up.stdout + up.stderr
        rerun = f"cd {shlex.quote(str(tmp_path))} && {resume_command(overrides)}"
        assert rerun in up.stderr

        sent_before = len(server.calls)
        again = subprocess.run([sys.executable, *shlex.split(named["command"])[1:]], env=env, cwd=named["cwd"],
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert len(server.calls) > sent_before
    finished = [p for p in (tmp_path / "out" / "runs").glob("*/*") if (p / "config.json").exists()]
    assert len(finished) == 1 and json.loads((finished[0] / "scores.json").read_text())["n_scored"] == N_TASKS
