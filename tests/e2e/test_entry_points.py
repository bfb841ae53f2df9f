"""Every entry point behaves alike (docs/reference/entry-points.md), checked through the real CLIs.

Bad input exits 2 with one error line in the common format and no traceback, before any
request; ``--help`` says what wildtrace is before Hydra's text; a mistyped group gets the same
did-you-mean as a mistyped key; a refused command or a check leaves nothing under ``runs/``
that the report would take for a run; a judge keyed ``model`` is refused.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, settings
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace import paper
from wildtrace.exitcodes import LOG_FORMAT, ExitCode

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "wildtrace" / "data" / "sample"
#: The common error line: Hydra's job-logging format, the ``wildtrace`` logger, ``<prog>: error: ``.
ERROR_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[wildtrace\]\[ERROR\] - "
                        r"(?P<prog>[\w.-]+): error: \S")
HAS_ESTIMATE = (ROOT / "wildtrace" / "estimate.py").is_file()  # on this checkout (an editable install may see another)


def cli(module: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` in ``cwd``, with no MLflow or wildtrace variable of the caller's."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_", "API_KEY"))}
    clean.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=clean, capture_output=True, text=True,
                          timeout=300)


def error_lines(stderr: str) -> list[re.Match]:
    """The stderr lines in the common error format."""
    return [m for m in (ERROR_LINE.match(line) for line in stderr.splitlines()) if m]


def run_looking(root: Path) -> list[Path]:
    """Folders under ``<root>/runs`` that hold anything (a run's folder holds at least its job log)."""
    runs = root / "runs"
    return [p for p in runs.glob("*/*") if p.is_dir()] if runs.is_dir() else []


def paper_config(tmp_path: Path, url: str, judge_name: str = "Qwen3.5") -> Path:
    """A §6 config.json pointing at ``url`` with one judge."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"base_url": f"{url}/v1", "model": "my-model", "reasoning": False,
                                "judges": [{"name": judge_name, "model": "qwen3.5-plus"}]}))
    return path


#: What a Hydra entry point is given first: its outputs in tmp_path, no MLflow store.
HYDRA_ARGS = {m: ["root={tmp}", "mlflow.enabled=false"]
              for m in ("wildtrace", "wildtrace.check", "wildtrace.probe", "wildtrace.estimate")}
HYDRA_ARGS["wildtrace.report"] = ["root={tmp}"]

# (module, args, prog in the error line): one bad input per entry point, each refused before any request.
BAD_INPUT = [
    ("wildtrace", ["stage=bogus"], "wildtrace"),  # composes, then refused by the settings' own check
    ("wildtrace", ["judge_panel.judges={}"], "wildtrace"),
    ("wildtrace", ["a=[1"], "wildtrace"),  # an override that does not parse (Hydra: exit 1 and its own text)
    ("wildtrace.check", ["stage=bogus"], "wildtrace-check"),
    ("wildtrace.check", ["judge_pannel=offline"], "wildtrace-check"),
    ("wildtrace.report", ["report.run_dir=[x]"], "wildtrace.report"),
    ("wildtrace.upload", ["{tmp}/no-such-run"], "wildtrace-upload"),
    ("wildtrace.upload", ["--bogus", "{tmp}"], "wildtrace-upload"),
    ("wildtrace.download", ["--bogus"], "wildtrace-download"),
    ("wildtrace.paper", [], "wildtrace.paper"),
    ("wildtrace.paper", ["eval", "--config", "{tmp}/missing.json", "--data", "{tmp}/d.json", "--corpus", "{tmp}",
                         "--out", "{tmp}/r.json"], "wildtrace-eval"),
    ("wildtrace.paper", ["judge", "--config", "{tmp}/missing.json"], "wildtrace-judge"),  # argparse: --data missing
    ("wildtrace.probe", ["probe.languges=[en]"], "wildtrace.probe"),
    pytest.param("wildtrace.estimate", ["judge_pannel=offline"], None,  # its name is its author's choice
                 marks=pytest.mark.skipif(not HAS_ESTIMATE, reason="wildtrace.estimate is not on this branch")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("module", "args", "prog"), BAD_INPUT, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_bad_input_exits_2_with_one_error_line(tmp_path: Path, module: str, args: list[str], prog: str) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in [*HYDRA_ARGS.get(module, []), *args]]
    proc = cli(module, *argv, cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    found = error_lines(proc.stderr)
    assert len(found) == 1 and found[0]["prog"] == (prog or found[0]["prog"]), proc.stderr
    assert "HYDRA_FULL_ERROR" not in proc.stderr and "To append to your config use +" not in proc.stderr
    assert run_looking(tmp_path) == [] and run_looking(tmp_path / "outputs") == []


@pytest.mark.slow
def test_help_says_what_wildtrace_is_before_hydras_text(tmp_path: Path) -> None:
    proc = cli("wildtrace", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    head, hydra_text = proc.stdout.split("== Configuration groups ==", 1)
    assert head.startswith("wildtrace: a harness that reproduces the WildTrace long-context benchmark")
    for group in ("model", "decoding", "judge_panel", "judge", "dataset", "access"):
        assert re.search(rf"^  {group} +\S", head, re.M), group
    for entry in ("wildtrace ", "wildtrace.check", "wildtrace.report", "wildtrace.upload", "wildtrace.download",
                  "wildtrace.paper eval|judge", "wildtrace.probe"):
        assert f"\n  {entry}" in head, entry
    assert "judge_panel: offline" in hydra_text  # Hydra's own listing follows, options and config
    assert not (tmp_path / "outputs").exists()


MISTYPED = [
    (["judge_pannel=offline"], "unknown config key: judge_pannel (did you mean judge_panel?)"),
    (["decoding.temprature=0.3"], "unknown config key: decoding.temprature (did you mean decoding.temperature?)"),
    (["judge_panel=ofline"], "did you mean judge_panel=offline?"),
    (["-m", "model=extractive,extractiv"], "did you mean model=extractive?"),  # each option of a sweep
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), MISTYPED, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_mistyped_group_gets_did_you_mean_like_a_key(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli("wildtrace", *args, f"root={tmp_path}", "mlflow.enabled=false", cwd=tmp_path)  # -m goes first
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    (line,) = error_lines(proc.stderr)
    assert message in line.string and "+" not in line.string, line.string
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.slow
def test_refused_commands_and_checks_leave_no_run_the_report_warns_about(tmp_path: Path) -> None:
    """One real run, then a refused run, a refused paper step and a check: the report reads one run, warns of none."""
    base = [f"root={tmp_path}", "mlflow.enabled=false", "dataset.limit=1"]
    good = cli("wildtrace", *base, cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert len(run_looking(tmp_path)) == 1
    refused = cli("wildtrace", *base, "stage=judge", cwd=tmp_path)  # composes, Hydra makes the folder, then refused
    assert refused.returncode == ExitCode.BAD_INPUT and "stage=judge needs responses=PATH" in refused.stderr
    check = cli("wildtrace.check", *base, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (tmp_path / "checks").is_dir() and list((tmp_path / "checks").glob("*/*/check.log"))
    assert len(run_looking(tmp_path)) == 1

    def no_key(call: Call) -> Reply:
        return chat("unreachable")

    with LoopbackServer(no_key) as server:  # paper: composed, its run folder made, then refused for the key
        step = cli("wildtrace.paper", "eval", "--config", str(paper_config(tmp_path, server.url)), "--data",
                   str(SAMPLE / "tasks.json"), "--corpus", str(SAMPLE / "corpus"), "--out", str(tmp_path / "r.json"),
                   cwd=tmp_path)
        assert server.calls == []
    assert step.returncode == ExitCode.BAD_INPUT and "API_KEY is not set" in step.stderr, step.stderr
    assert run_looking(tmp_path / "outputs") == []

    report = cli("wildtrace.report", f"root={tmp_path}", "mlflow.log_report=false", "report.bootstrap.resamples=50",
                 f"report.run_dirs=[{tmp_path}/runs/*/*]", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "skipped" not in report.stderr and "WARNING" not in report.stderr, report.stderr
    assert "| extractive" in report.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["wildtrace", "wildtrace.check"])
def test_a_judge_keyed_model_is_refused_before_any_request(tmp_path: Path, module: str) -> None:
    """Judge ``model`` would take the model's endpoint (endpoints are keyed by label) and answer the questions."""
    with LoopbackServer(lambda call: chat("The door was green.")) as server:
        proc = cli(module, f"root={tmp_path}", "mlflow.enabled=false", "dataset.limit=1", "model=custom",
                   "model.route=test-model", f"model.base_url={server.url}/v1", f"model.api_key_env={TEST_KEY_ENV}",
                   "+judge@judge_panel.judges.model=lexical", cwd=tmp_path, env={TEST_KEY_ENV: "sk-test-entry"})
        assert server.calls == []
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    (line,) = error_lines(proc.stderr)
    assert "judge_panel.judges.model: the judge key 'model' is reserved for the model under test" in line.string
    assert "Traceback" not in proc.stderr and run_looking(tmp_path) == []


def test_the_paper_cli_never_derives_the_judge_key_model() -> None:
    """config.json names judges freely: one named "Model" gets another key rather than the model's label."""
    judges = paper.parse_judges([{"name": "Model", "model": "m-1"}, {"name": "model", "model": "m-2"}], "http://x/v1")
    assert [j.key for j in judges] == ["model_2", "model_3"]


def test_run_returns_the_headline_and_the_entry_point_prints_it(tmp_path: Path, capsys, caplog) -> None:
    """run() prints nothing; show_headline prints it to stdout, then logs it as the job log's last record."""
    from wildtrace.app import HEADLINE_LOG, show_headline
    from wildtrace.runtime.run.execute import run

    result = run(settings(tmp_path, ["dataset.limit=1", "mlflow.enabled=false"]))
    assert capsys.readouterr().out == "" and result.headline.startswith("wildtrace ")
    with caplog.at_level(logging.INFO, logger=HEADLINE_LOG):
        show_headline(result)
    assert capsys.readouterr().out == result.headline + "\n"
    assert caplog.records[-1].name == HEADLINE_LOG and caplog.records[-1].getMessage() == result.headline


def test_the_exit_code_table_is_the_enum() -> None:
    """docs/reference/entry-points.md lists every ExitCode (value and name), so a new one lands in the table too."""
    text = (ROOT / "docs" / "reference" / "entry-points.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.M))
    assert {int(v): n for v, n in rows.items()} == {int(c): c.name for c in ExitCode}


def test_the_error_line_format_is_hydras() -> None:
    """Where Hydra configured nothing (argparse commands, before a Hydra job), the line is Hydra's job-log format."""
    import hydra
    from omegaconf import OmegaConf

    job_logging = OmegaConf.load(Path(hydra.__file__).parent / "conf" / "hydra" / "job_logging" / "default.yaml")
    assert job_logging.formatters.simple.format == LOG_FORMAT


@pytest.mark.parametrize(("argv", "want"), [
    ([], True),
    (["model=qwen3-max", "decoding.temperature=0.3"], True),
    (["mlflow.enabled=false"], False),
    (["mlflow.enabled=False"], False),
    (["++mlflow.enabled=off"], False),
    (["mlflow.enabled=true"], True),
    (["mlflow.experiment=false"], True),
    (["-m", "decoding.temperature=0,0.7"], False),  # a sweep: each job starts its own
    (["--multirun", "decoding.temperature=0,0.7"], False),
    (["--help"], False),
    (["--hydra-help"], False),
    (["--cfg", "job"], False),
    (["--info"], False),
])
def test_the_logging_process_is_prestarted_only_for_one_job_that_logs(argv, want):
    from wildtrace.app import prestart_wanted

    assert prestart_wanted(argv) is want


@pytest.mark.slow
@pytest.mark.parametrize("run_dir", ["./run", ".", "./a/b/run"])
def test_a_refused_command_removes_only_the_folders_it_made(tmp_path: Path, run_dir: str) -> None:
    """Started in an empty folder x: the refused run's own folder goes, x (and anything it did not make) stays."""
    here = tmp_path / "x"
    here.mkdir()
    (tmp_path / "keep.txt").write_text("the parent's own file")
    proc = cli("wildtrace", f"root={tmp_path}/outputs", "mlflow.enabled=false", "stage=judge",
               f"hydra.run.dir={run_dir}", cwd=here)
    assert proc.returncode == ExitCode.BAD_INPUT and "stage=judge needs responses=PATH" in proc.stderr, proc.stderr
    assert here.is_dir() and (tmp_path / "keep.txt").is_file()
    assert not (here / "run").exists() and not (here / "a").exists()


#: (command, what its help's first line names): each entry point's --help says what THAT command is first.
HELPS = [(["wildtrace"], "wildtrace: a harness"), (["wildtrace.check"], "wildtrace.check: "),
         (["wildtrace.estimate"], "wildtrace.estimate: "), (["wildtrace.probe"], "wildtrace.probe: "),
         (["wildtrace.report"], "wildtrace.report: "), (["wildtrace.upload"], "python -m wildtrace.upload"),
         (["wildtrace.paper"], "wildtrace.paper: "), (["wildtrace.paper", "eval"], "wildtrace-eval ("),
         (["wildtrace.paper", "judge"], "wildtrace-judge ("), (["wildtrace.download"], "python -m wildtrace.download")]


@pytest.mark.slow
@pytest.mark.parametrize(("command", "first"), HELPS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_each_help_describes_its_own_entry_point_first(tmp_path: Path, command: list[str], first: str) -> None:
    proc = cli(*command, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert first in proc.stdout.splitlines()[0], proc.stdout[:300]
    assert "``" not in proc.stdout  # plain text, not a docstring's markup
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_check_reports_every_problem_of_the_config_at_once(tmp_path: Path) -> None:
    """An unset gateway URL, a retired route and four missing keys: one error, all of them, nothing sent."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))
           and not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    proc = subprocess.run([sys.executable, "-m", "wildtrace.check", f"root={tmp_path}", "mlflow.enabled=false",
                           "model=gpt-4.1", "judge_panel=paper"], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert len(error_lines(proc.stderr)) == 1 and "Traceback" not in proc.stderr
    for problem in ("judge_panel.judges.claude_sonnet.base_url is empty: set WILDTRACE_GATEWAY_BASE_URL",
                    "judge_panel.judges.gemini_flash: route 'gemini-2.5-flash' at generativelanguage.googleapis.com "
                    "is retired", "environment variable OPENAI_API_KEY is not set",
                    "environment variable WILDTRACE_GATEWAY_API_KEY is not set",
                    "environment variable DASHSCOPE_API_KEY is not set",
                    "environment variable GEMINI_API_KEY is not set"):
        assert problem in proc.stderr, problem
    assert "unset.invalid" not in proc.stdout + proc.stderr


def test_a_launcher_that_is_not_installed_names_the_extra(monkeypatch) -> None:
    from wildtrace.config import ConfigError
    from wildtrace.config.checks import LAUNCHERS, check_launcher

    check_launcher(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])  # installed with the dev extra
    monkeypatch.setitem(LAUNCHERS, "joblib", ("hydra_plugins.no_such_launcher", LAUNCHERS["joblib"][1]))
    with pytest.raises(ConfigError, match=r"hydra/launcher=joblib needs a launcher that is not installed: "
                                          r"pip install 'wildtrace\[team\]' \(hydra-joblib-launcher\)"):
        check_launcher(["-m", "hydra/launcher=joblib"])
