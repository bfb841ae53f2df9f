"""Team scale: many jobs against one `mlflow server` on a real PostgreSQL, one cache shared by
processes in different folders, and a sweep resumed on another machine (docs/team/team.md)."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from servers.loopback import Call, LoopbackServer, Reply, chat
from servers.pg import pg_mlflow  # noqa: F401 - the module's PostgreSQL-backed server (a fixture)

pytestmark = pytest.mark.slow

SAMPLE_IDS = {t["question_id"] for t in json.loads(
    (Path(__file__).resolve().parents[2] / "wildtrace" / "data" / "sample" / "tasks.json").read_text())}
OFFLINE_JUDGES = {"judge/lenient", "judge/balanced", "judge/strict"}
LOCKED = "database is locked"


def env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}


def wildtrace(*args: str, module: str = "wildtrace", cwd: Path | None = None,
              timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", module, *args], env=env(), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert LOCKED not in proc.stdout + proc.stderr and "NOT logged" not in proc.stderr
    return proc


def sweep_runs(url: str, experiment: str):
    """(client, the sweep parent, its children) of the one sweep in ``experiment``."""
    client = MlflowClient(tracking_uri=url)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    (parent,) = [r for r in runs if r.data.tags.get("wildtrace.sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return client, parent, children


def check_logged(client: MlflowClient, child) -> None:
    """The child is finished, with one trace per sample task, each carrying every judge's feedback."""
    assert child.info.status == "FINISHED"
    run_dir = Path(child.data.tags["wildtrace.run_dir"])
    scores = json.loads((run_dir / "scores.json").read_text())
    assert child.data.metrics["overall_pct"] == pytest.approx(scores["overall"], abs=0.005)
    traces = client.search_traces(locations=[child.info.experiment_id], run_id=child.info.run_id, max_results=100,
                                  include_spans=False)
    assert sorted(t.info.tags["question_id"] for t in traces) == sorted(SAMPLE_IDS)
    by_task = {t["question_id"]: t for t in scores["tasks"]}
    for trace in traces:
        task = by_task[trace.info.tags["question_id"]]
        feedback = {a.name: a.value for a in trace.info.assessments if a.name.startswith("judge/")}
        assert set(feedback) == OFFLINE_JUDGES, task["question_id"]
        assert feedback == {f"judge/{k}": pytest.approx(v["score"]) for k, v in task["judges"].items()}


def report(root: Path, url: str, experiment: str) -> Path:
    """`python -m wildtrace.report` against the server; returns the report's folder."""
    proc = wildtrace(f"root={root}", f"mlflow.tracking_uri={url}", f"mlflow.experiment={experiment}",
                     module="wildtrace.report")
    return Path(re.search(r"^report: (.+)/report\.html$", proc.stdout, re.M).group(1))


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_eight_parallel_jobs_on_postgres(pg_mlflow, tmp_path):  # noqa: F811 - the fixture
    """8 joblib jobs at once against mlflow server on PostgreSQL: every run, trace and feedback logged."""
    url, experiment = pg_mlflow.url, "team-joblib"
    proc = wildtrace("-m", f"root={tmp_path / 'outputs'}", "progress=false", "judge_panel=offline_panel",
                     "hydra/launcher=joblib", "hydra.launcher.n_jobs=8",
                     "decoding.temperature=0.1,0.4,0.7,1.0", "decoding.replicate=0,1",
                     f"mlflow.tracking_uri={url}", f"mlflow.experiment={experiment}")
    assert " 8 jobs" in proc.stdout.split("multirun:")[1].splitlines()[0]
    client, parent, children = sweep_runs(url, experiment)
    assert parent.info.status == "FINISHED"
    assert sorted((c.data.params["decoding.temperature"], c.data.params["decoding.replicate"]) for c in children) == \
        sorted((t, r) for t in ("0.1", "0.4", "0.7", "1.0") for r in ("0", "1"))
    for child in children:
        check_logged(client, child)
    table = json.loads(Path(client.download_artifacts(parent.info.run_id, "children.json")).read_text())
    assert len(table["data"]) == 8
    assert not (tmp_path / "outputs" / "mlartifacts").exists()  # the server holds the artifacts
    assert LOCKED not in pg_mlflow.log.read_text(errors="replace")

    folder = report(tmp_path / "outputs", url, experiment)
    provenance = read_csv(folder / "provenance.csv")
    assert sorted(r["run_id"] for r in provenance) == sorted(c.info.run_id for c in children)
    board = read_csv(folder / "leaderboard.csv")
    assert len(board) == 4 and all(r["n_runs"] == "2" for r in board)  # a row per temperature, 2 replicates each


def test_submitit_local_jobs_on_postgres(pg_mlflow, tmp_path):  # noqa: F811 - the fixture
    """hydra-submitit-launcher's local mode: the jobs are real submitit jobs, logged to the same server."""
    url, experiment = pg_mlflow.url, "team-submitit"
    wildtrace("-m", f"root={tmp_path / 'outputs'}", "progress=false", "judge_panel=offline_panel",
              "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
              "judge_panel.replicate=0,1", f"mlflow.tracking_uri={url}", f"mlflow.experiment={experiment}")
    client, parent, children = sweep_runs(url, experiment)
    assert parent.info.status == "FINISHED"
    assert sorted(c.data.params["judge_panel.replicate"] for c in children) == ["0", "1"]
    for child in children:
        check_logged(client, child)
    # each job ran as a submitit job: its result was pickled by submitit in the sweep's .submitit folder
    sweep_dir = Path(children[0].data.tags["wildtrace.run_dir"]).parent
    assert len(list(sweep_dir.glob(".submitit/*/*_result.pkl"))) == 2


# --- one cache, two machines -------------------------------------------------------------------

def lock_files_open(pid: int, locks: Path) -> bool:
    """Whether process ``pid`` has a per-key lock file of the shared cache open (it is waiting or holding)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if Path(os.readlink(fd)).is_relative_to(locks):
                return True
        except OSError:
            continue
    return False


class RivalGate:
    """Holds every reply until the OTHER process has a lock file of the shared cache open.

    So neither process can find an outcome stored before both are racing for the same keys:
    whatever one of them does not send, it waited for and read from the cache.
    """

    def __init__(self, locks: Path) -> None:
        self.locks = locks
        self.pids: dict[str, int] = {}  # the Authorization header → the process that sends with it
        self.open = False
        self.timed_out = False

    def wait(self, auth: str) -> None:
        deadline = time.monotonic() + 120  # a safety net; the event waited for is the rival's lock file
        while not self.open:
            rivals = [pid for key, pid in self.pids.items() if key != auth]
            if rivals and lock_files_open(rivals[0], self.locks):
                self.open = True
            elif time.monotonic() > deadline:
                self.timed_out = self.open = True
            else:
                time.sleep(0.05)

    def responder(self, call: Call) -> Reply:
        self.wait(call.headers.get("authorization", ""))
        if call.route == "test-model":
            return chat(f"The seal was worn ({call.prompt[-40:]}).")
        return chat(json.dumps({"points_awarded": [60, 40], "total": 100}))


def remote_run(url: str, root: Path, cache: Path, tracking: tuple[str, ...] = ("mlflow.enabled=false",)) -> list[str]:
    """A sample run whose model and judge are the loopback server, with the cache at ``cache``."""
    judge = "judge_panel.judges.lexical"
    return [f"root={root}", f"cache.dir={cache}", *tracking, "progress=false",
            "model=custom", "model.route=test-model", f"model.base_url={url}/v1", "model.api_key_env=WT_TEAM_KEY",
            "model.stream=false", f"{judge}.name=judge-a", f"{judge}.provider=openai", f"{judge}.route=judge-a",
            f"{judge}.base_url={url}/v1", f"{judge}.api_key_env=WT_TEAM_KEY", f"{judge}.stream=false"]


def run_files(root: Path) -> tuple[dict, dict]:
    (folder,) = [p.parent for p in root.glob("runs/*/*/run_stats.json")]
    return json.loads((folder / "run_stats.json").read_text()), json.loads((folder / "scores.json").read_text())


def test_two_machines_share_one_cache_and_pay_each_call_once(tmp_path):
    """Two processes, each in its own folder with its own outputs, one cache folder: racing for
    every key (10 answers, 10 judge calls), each call is sent once; the other process waits for
    it and reads it from the cache."""
    cache = tmp_path / "shared" / "cache"
    gate = RivalGate(cache / "locks")
    with LoopbackServer(gate.responder, latency_s=0.2) as server:
        procs = {}
        for name in ("a", "b"):
            home = tmp_path / name
            home.mkdir()
            key = f"sk-team-{name}-" + "5e" * 8
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "wildtrace", *remote_run(server.url, home / "outputs", cache)],
                env={**env(), "WT_TEAM_KEY": key}, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            gate.pids[f"Bearer {key}"] = procs[name].pid
        logs = {name: p.communicate(timeout=600) for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, logs[name]
    assert not gate.timed_out, "the two processes never raced (no lock file open in the rival)"
    bodies = Counter(c.raw for c in server.calls)
    assert len(bodies) == 20 and set(bodies.values()) == {1}  # every call sent, none twice
    assert {c.headers["authorization"] for c in server.calls} <= set(gate.pids)
    stats = {name: run_files(tmp_path / name / "outputs") for name in procs}
    for name, (st, _) in stats.items():
        assert "answers: 10 to request, 0 from the cache" in logs[name][1]  # nothing stored when it planned
        assert sum(st["requests"].values()) + st["cache_hits"] == 20  # what it did not send, it read
    assert sum(sum(st["requests"].values()) for st, _ in stats.values()) == 20
    assert stats["a"][1]["tasks"] == stats["b"][1]["tasks"]  # the same outcomes in both folders
    assert not list(cache.glob("**/.tmp-*"))


# --- a sweep resumed on another machine ----------------------------------------------------------

TEMPERATURES = ("0.1", "0.4", "0.7", "1.0")
#: The sweep's first job sends every point's answer of a task (the prompt-cache schedule), so the jobs after
#: it only judge. The first attempt is killed in its third job (t=0.7) once this many of that job's judge
#: calls are stored; its fourth job never starts. Two jobs done, two killed: half the sweep.
KILLED_T, LET_THROUGH = 0.7, 3


class KillGate:
    """Answers every call but the judge calls of the third job's answers: LET_THROUGH of those, then
    holds the rest (they never come back: the machine is killed while they wait)."""

    def __init__(self) -> None:
        self.holding = True
        self.let: set[str] = set()  # the killed job's judge calls let through (by the prompt)
        self.held = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def responder(self, call: Call) -> Reply:
        text = call.prompt
        if call.route == "test-model":
            return chat(f"The seal was worn (t={call.body['temperature']}, {len(text)} chars).")
        if self.holding and f"(t={KILLED_T}," in text:
            with self.lock:
                hold = len(self.let) >= LET_THROUGH and text not in self.let
                self.let.add(text) if not hold else None
                self.held += hold
            if hold:
                self.release.wait(120)  # the safety net; the test kills the sweep long before
                return Reply(503, {"error": {"message": "held"}})
        return chat(json.dumps({"points_awarded": [60, 40], "total": 100}))


def stored_outcomes(cache: Path) -> int:
    return sum(1 for p in cache.glob("*/*.json") if p.parent.name not in ("locks", "pacing"))


def test_a_sweep_killed_half_way_resumes_on_another_machine(pg_mlflow, tmp_path):  # noqa: F811 - the fixture
    """Machine A runs a 4-job sweep and dies in job 3; machine B (another folder, the same cache
    and server) reruns the sweep: it sends only the calls A never stored, and the report puts
    B's runs of the settings A finished with A's (one row each), not beside them."""
    url, experiment = pg_mlflow.url, "team-resume"
    cache = tmp_path / "shared" / "cache"
    gate = KillGate()
    with LoopbackServer(gate.responder) as server:
        tracking = (f"mlflow.tracking_uri={url}", f"mlflow.experiment={experiment}")

        def args(home: Path) -> list[str]:
            return ["-m", *remote_run(server.url, home / "outputs", cache, tracking), "model.max_concurrency=4",
                    "decoding.temperature=" + ",".join(TEMPERATURES)]

        (tmp_path / "a").mkdir()
        first = subprocess.Popen([sys.executable, "-m", "wildtrace", *args(tmp_path / "a")],
                                 env={**env(), "WT_TEAM_KEY": "sk-team-" + "a1" * 8}, cwd=tmp_path / "a",
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            # the sweep's 40 answers, two jobs' 10 judge calls each, and the killed job's LET_THROUGH, all stored
            deadline = time.monotonic() + 300
            while not (gate.held and stored_outcomes(cache) >= 40 + 20 + LET_THROUGH):
                assert first.poll() is None and time.monotonic() < deadline, "the first attempt never got half-way"
                time.sleep(0.1)
        finally:
            os.killpg(first.pid, signal.SIGKILL)  # the machine goes down, launcher, job and logging process
            first.wait()
        first_paid = {c.raw for c in server.completed}  # before the held calls are let go (to nobody)
        assert len(first_paid) == 40 + 20 + LET_THROUGH
        gate.holding = False
        gate.release.set()
        sent_before = len(server.calls)
        (tmp_path / "b").mkdir()
        rerun = subprocess.run([sys.executable, "-m", "wildtrace", *args(tmp_path / "b")],
                               env={**env(), "WT_TEAM_KEY": "sk-team-" + "b2" * 8}, cwd=tmp_path / "b",
                               capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        resumed = [c.raw for c in server.calls[sent_before:]]
    assert len(resumed) == len(set(resumed)) == 80 - len(first_paid)  # only what A never stored
    assert not set(resumed) & first_paid  # nothing A paid for is paid again

    client = MlflowClient(tracking_uri=url)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=100)
    jobs = [r for r in runs if r.data.tags.get("wildtrace.sweep") != "parent"]
    finished = sorted(r.data.params["decoding.temperature"] for r in jobs if r.info.status == "FINISHED")
    assert finished == sorted(["0.1", "0.4", *TEMPERATURES])  # A's two, then B's four
    folder = report(tmp_path / "b" / "outputs", url, experiment)
    board = read_csv(folder / "leaderboard.csv")
    assert len(board) == 4 and all(r["n_runs"] == "1" for r in board)  # a row per setting, resumed or not
    provenance = read_csv(folder / "provenance.csv")
    assert sum(1 for r in provenance if r["duplicates"]) == 2  # B's reruns of A's finished jobs, folded in


# --- cluster presets ---------------------------------------------------------------------------

def launcher_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    from wildtrace.app import CONF_DIR
    from wildtrace.config import register

    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True).hydra.launcher


def test_slurm_preset_submits_an_array_with_its_settings(tmp_path):
    """conf/hydra/launcher/slurm.yaml, mapped as hydra-submitit-launcher maps it, gives the sbatch
    script submitit would submit: the partition, time limit and array parallelism as set."""
    import inspect

    from omegaconf import OmegaConf
    from submitit.slurm.slurm import SlurmExecutor, _make_sbatch_string

    cfg = launcher_config("hydra/launcher=slurm", "hydra.launcher.partition=cpu", "hydra.launcher.timeout_min=90",
                          "hydra.launcher.array_parallelism=4", f"hydra.launcher.submitit_folder={tmp_path}")
    params = OmegaConf.to_container(cfg, resolve=True)
    assert params.pop("_target_").endswith("SlurmLauncher")
    folder = params.pop("submitit_folder")
    assert params.pop("max_num_timeout") == 2  # the executor's, not sbatch's
    names = SlurmExecutor._equivalence_dict()  # the launcher's shared names → submitit's Slurm names
    sbatch = {names.get(k, k): v for k, v in params.items()}
    sbatch["mem"] = f"{sbatch['mem']}GB"
    assert set(sbatch) <= set(inspect.signature(_make_sbatch_string).parameters)  # every setting is a real one
    script = _make_sbatch_string("python -m submitit.core._submit", folder, map_count=38, **sbatch)  # 19 models × 2
    for line in ("#SBATCH --partition=cpu", "#SBATCH --time=90", "#SBATCH --array=0-37%4", "#SBATCH --cpus-per-task=2",
                 "#SBATCH --mem=2GB", "#SBATCH --ntasks-per-node=1"):
        assert line in script.splitlines(), line


def test_ray_preset_composes_when_the_plugin_is_installed():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="hydra-ray-launcher is not installed "
                        "(pip install hydra-ray-launcher); conf/hydra/launcher/ray_cluster.yaml is then untested")
    cfg = launcher_config("hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=127.0.0.1:6379")
    assert cfg._target_.endswith("RayLauncher") and cfg.ray.init.address == "127.0.0.1:6379"
    assert cfg.ray.remote.num_cpus == 2


# --- a shared filesystem that refuses locks ----------------------------------------------------

@pytest.mark.parametrize("code", [errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP],
                         ids=["nfs-no-lockd", "lustre-noflock", "no-flock-support"])
def test_a_filesystem_that_refuses_locks_still_runs_and_caches(tmp_path, monkeypatch, caplog, code):
    """flock(2) fails with an error (not 'held by another') where the filesystem takes no locks:
    the run goes on unlocked, says so once, and stores every outcome (so a rerun pays nothing)."""
    import fcntl

    from conftest import settings
    from wildtrace.runtime.run.execute import run

    def refusing(fd: int, operation: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", refusing)
    first = run(settings(tmp_path, ["dataset.limit=3"]))
    assert first.summary["n_total"] == 3 and sum(first.stats["requests"].values()) == 6
    refused = [r for r in caplog.records if "refuses locks" in r.getMessage()]
    assert len(refused) == 1 and os.strerror(code) in refused[0].getMessage()
    again = run(settings(tmp_path, ["dataset.limit=3"]))
    assert sum(again.stats["requests"].values()) == 0 and again.stats["cache_hits"] == 6
    assert again.summary["overall"] == first.summary["overall"]
