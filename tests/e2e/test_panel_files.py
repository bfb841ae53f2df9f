"""Ablation panels are delta files of ``paper`` (wildtrace/config/panel_files.py), composed as their full copies were.

tests/golden/judge_panels.json is the judge_panel node each paper* file composed to when the
six ablations were full copies of the panel (saved before they became delta files): the
composed judges, their order, the settings made from them, the MLflow tags and run name must
all be what they were, so a cache filled by a full-copy run serves the delta-file run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import pytest
from conftest import compose_config
from omegaconf import OmegaConf, open_dict

from wildtrace.app import CONF_DIR, check_command_line
from wildtrace.config import ConfigError, JudgePanelConfig, to_settings
from wildtrace.exitcodes import ExitCode
from wildtrace.config.panel_files import check_panel_drops, panel_errors
from wildtrace.tracking.rundir import base_tags, run_name

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "judge_panels.json").read_text(encoding="utf-8"))
ABLATIONS = sorted(name for name in GOLDEN if name != "paper")
PAPER_JUDGES = ["claude_sonnet", "qwen", "gemini_flash"]


@pytest.fixture(autouse=True)
def gateway_url(monkeypatch):
    """The paper's private gateway judge has no default host: name one so the panels validate."""
    monkeypatch.setenv("WILDTRACE_GATEWAY_BASE_URL", "https://gateway.example.test/v1")


def test_the_golden_holds_the_paper_panel_and_its_six_ablations():
    shipped = [f"paper_only_{j}" for j in PAPER_JUDGES] + [f"paper_without_{j}" for j in PAPER_JUDGES]
    assert sorted(shipped) == ABLATIONS
    assert list(GOLDEN["paper"]["judges"]) == PAPER_JUDGES


@pytest.mark.parametrize("panel", sorted(GOLDEN))
def test_each_panel_composes_as_its_full_copy_did(panel):
    composed = OmegaConf.to_container(compose_config([f"judge_panel={panel}"]).judge_panel, resolve=False)
    assert json.dumps(composed) == json.dumps(GOLDEN[panel])  # the same keys and values, in the same order
    assert list(composed["judges"]) == list(GOLDEN[panel]["judges"])  # the judges run (and are listed) in it


@pytest.mark.parametrize("panel", ABLATIONS)
def test_settings_tags_and_run_name_are_the_full_copys(panel):
    """What a run derives from the panel (endpoints and so cache keys, config.json, MLflow tags, run name)."""
    now = to_settings(compose_config([f"judge_panel={panel}"]))
    before = compose_config([f"judge_panel={panel}"])
    with open_dict(before):
        before.judge_panel = OmegaConf.merge(OmegaConf.structured(JudgePanelConfig), GOLDEN[panel])
    then = to_settings(before)
    assert now == then and list(now.judge_panel.judges) == list(then.judge_panel.judges)
    config, then_config = dataclasses.asdict(now), dataclasses.asdict(then)
    assert base_tags(config, "run", None) == base_tags(then_config, "run", None)
    assert base_tags(config, "run", None)["judge_panel.name"] == panel
    assert run_name(config, {}, None) == run_name(then_config, {}, None)


@pytest.mark.parametrize("panel", ABLATIONS)
def test_each_ablation_is_a_small_delta_of_paper(panel):
    """It starts from paper and only drops judges: no judge, endpoint or panel setting of its own but the name."""
    node = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "judge_panel" / f"{panel}.yaml"))
    kept = panel.removeprefix("paper_only_").removeprefix("paper_without_")
    dropped = [kept] if panel.startswith("paper_without_") else [j for j in PAPER_JUDGES if j != kept]
    assert node == {"defaults": ["paper", *({f"override /judge@judges.{j}": None} for j in dropped), "_self_"],
                    "name": panel}


def _conf(tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the config tree with these panel files added."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    for name, text in files.items():
        (conf / "judge_panel" / f"{name}.yaml").write_text(text, encoding="utf-8")
    return conf


def _delta(parent: str, *entries: str, name: str = "mine") -> str:
    lines = "".join(f"  - {e}\n" for e in entries)
    return f"defaults:\n  - {parent}\n{lines}  - _self_\nname: {name}\n"


DROP = "override /judge@judges.{}: null"
# (files added, the panel chosen, the error's text or None when the file is sound)
CASES = [
    ({"mine": _delta("paper", DROP.format("qwen"))}, "mine", None),
    ({"mine": _delta("paper", DROP.format("qwenn"))}, "mine",
     "judge_panel/mine.yaml: defaults entry 'override /judge@judges.qwenn: null' names judge 'qwenn', which the "
     "panel it starts from does not compose (its judges: claude_sonnet, qwen, gemini_flash; did you mean qwen?)"),
    ({"mine": _delta("paper", DROP.format("qwen"), DROP.format("qwen"))}, "mine",  # dropped once already
     "names judge 'qwen', which the panel it starts from does not compose (its judges: claude_sonnet, gemini_flash)"),
    ({"mine": _delta("offline_panel", DROP.format("strict"))}, "mine", None),
    ({"mine": _delta("offline_panel", DROP.format("qwen"))}, "mine", "(its judges: lenient, balanced, strict)"),
    ({"mine": _delta("paper_without_qwen", DROP.format("gemini_flash"))}, "mine", None),  # a delta of a delta
    ({"mine": _delta("paper_without_qwen", DROP.format("qwen"))}, "mine", "(its judges: claude_sonnet, gemini_flash)"),
    ({"mine": _delta("/judge_panel/paper", "override /judge@judges.qwen: claude_sonnet")}, "mine", None),  # re-chosen
    ({"mine": _delta("paper", "override /judge@judges.x: lexical")}, "mine", "names judge 'x'"),
    ({"mine": _delta("offline", DROP.format("lexical"))}, "mine", None),  # empty: the run's own check says so
    ({}, "no_such_panel", None),  # the option name check names it
    ({"mine": "defaults: [paper\n"}, "mine", "judge_panel/mine.yaml: cannot be read as YAML"),
]


@pytest.mark.parametrize(("files", "panel", "error"), CASES)
def test_a_drop_of_a_judge_the_parent_lacks_is_named(tmp_path, files, panel, error):
    try:
        errors = panel_errors(_conf(tmp_path, files), [panel])
    except ConfigError as exc:  # a file that does not parse stops the check at once
        errors = [str(exc)]
    if error is None:
        assert errors == []
    else:
        (found,) = errors
        assert error in found and str(tmp_path / "conf" / "judge_panel" / "mine.yaml") in found


def test_the_shipped_panels_drop_only_judges_they_have():
    panels = sorted(p.stem for p in (Path(CONF_DIR) / "judge_panel").glob("*.yaml"))
    assert panel_errors(Path(CONF_DIR), panels) == []


@pytest.mark.parametrize("overrides", [
    ["judge_panel=mine"], ["-m", "judge_panel=paper,mine"], ["judge_panel=choice(paper,mine)"],
])
def test_the_entry_point_refuses_it_before_composing_exit_2(tmp_path, caplog, overrides):
    conf = _conf(tmp_path, {"mine": _delta("paper", DROP.format("qwenn"))})
    with caplog.at_level(logging.ERROR, logger="wildtrace"), pytest.raises(SystemExit) as exit_:
        check_command_line("wildtrace", conf_dir=conf, argv=[*overrides, "mlflow.enabled=false"])
    assert exit_.value.code == ExitCode.BAD_INPUT
    (record,) = caplog.records
    assert record.getMessage().startswith(f"wildtrace: error: {conf / 'judge_panel' / 'mine.yaml'}: defaults entry "
                                          "'override /judge@judges.qwenn: null'")


def test_panels_not_chosen_on_the_command_line_are_not_read(tmp_path):
    conf = _conf(tmp_path, {"mine": _delta("paper", DROP.format("qwenn"))})
    check_panel_drops(["judge_panel=paper", "model=extractive"], conf)  # a broken file elsewhere stops no run
    with pytest.raises(ConfigError, match="qwenn"):
        check_panel_drops(["judge_panel=mine"], conf)
