"""Issue 23, item 3: the command line behaves as linters' do (ruff, grep, curl).

Configs here are hand-written DeepSpeed/Accelerate configs (no log lines are invented)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dsdoctor import settings
from dsdoctor.cli.completion import commands
from dsdoctor.cli.main import build_parser, main
from dsdoctor.settings import RuleInfo

BOTH_PRECISIONS = '{\n  "train_batch_size": 8,\n  "fp16": {"enabled": true},\n  "bf16": {"enabled": true}\n}\n'


@pytest.fixture
def alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no pyproject.toml above it and no user config."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(settings, "project_file", lambda start: _project(start, tmp_path))
    return tmp_path


def _project(start: Path, top: Path) -> Path | None:
    """project_file, stopped at the test's folder (the checkout's own pyproject is above it)."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "[tool.dsdoctor]" in candidate.read_text():
            return candidate
        if folder == top:
            return None
    return None


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


# --------------------------------------------------------------------------- pre-flight


def test_preflight_headline_counts_its_errors_and_json_says_error(alone, capsys) -> None:
    (alone / "ds.json").write_text(BOTH_PRECISIONS)
    assert main(["analyze", "--config", "ds.json"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("PRE-FLIGHT FAILED: 1 error in the inputs; fix it before launching")
    code, data = _json(capsys, ["analyze", "--config", "ds.json"])
    assert data["verdict"]["error"] is True and data["verdict"]["fate"] == "unknown"
    (alone / "ok.json").write_text('{"train_micro_batch_size_per_gpu": 2}\n')
    assert main(["analyze", "--config", "ok.json"]) == 0
    assert capsys.readouterr().out.startswith("PRE-FLIGHT OK: no error in the inputs")
    code, data = _json(capsys, ["analyze", "--config", "ok.json"])
    assert code == 0 and data["verdict"]["error"] is False


# --------------------------------------------------------------------------- config as a log


@pytest.mark.parametrize(("name", "text", "kind"), [
    ("ds_config.json", BOTH_PRECISIONS, "a DeepSpeed config"),
    ("accelerate.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
     "num_processes: 2\n", "an Accelerate config"),
])
@pytest.mark.parametrize("command", [["analyze"], ["report"], ["watch", "--plain"]])
def test_a_config_given_as_a_log_is_named(alone, capsys, name, text, kind, command) -> None:
    # report and watch take the same LOGs: one line, exit 2, no issue body / no following
    (alone / name).write_text(text)
    assert main([command[0], name, *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{name}: this is {kind}, not a log; pass it with --config {name}" in err
    assert not list(alone.glob("*.md")) and not (alone / ".github").exists()


# Log lines on real formats: DeepSpeed's loss scaler (deepspeedai/DeepSpeed#931) and a traceback.
LOG_TEXT = ("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
            "Traceback (most recent call last):\n"
            '  File "/home/alice/proj/train.py", line 89, in <module>\n')


@pytest.mark.parametrize("command", [["analyze", "other.log"], ["report", "other.log"],
                                     ["watch", "other.log", "--plain"]])
@pytest.mark.parametrize("name", ["train.log", "train.yaml"])
def test_a_log_given_as_config_is_named(alone, capsys, command, name) -> None:
    (alone / name).write_text(LOG_TEXT)
    (alone / "other.log").write_text("step 1\n")
    assert main([*command, "--config", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{name}: this is a log, not a config; pass it as a LOG (without --config)" in err


def test_a_yaml_config_with_log_like_comments_is_still_a_config(alone, capsys) -> None:
    (alone / "accelerate.yaml").write_text("# written 2024-04-10\ncompute_environment: LOCAL_MACHINE\n"
                                           "distributed_type: DEEPSPEED\nnum_processes: 2\n")
    assert main(["analyze", "--config", "accelerate.yaml"]) in (0, 1)
    assert "this is a log" not in capsys.readouterr().err


def test_a_json_log_is_still_a_log(alone, capsys) -> None:
    (alone / "metrics.json").write_text('{"loss": 1.5, "step": 3}\n')  # one DeepSpeed-ish key: no
    assert main(["analyze", "metrics.json"]) == 0


# --------------------------------------------------------------------------- did you mean


def test_did_you_mean_a_command(capsys) -> None:
    assert main(["analyse", "train.log"]) == 2
    err = capsys.readouterr().err
    assert "no command 'analyse': did you mean 'analyze'?" in err and err.count("\n") == 1


@pytest.mark.parametrize(("word", "meant"), [
    ("stage3-16bit-weight-not-saved", "stage3-16bit-weights-not-saved (DS314)"),
    ("confg", "config (a category)"),
])
def test_did_you_mean_a_rule(capsys, word, meant) -> None:
    assert main(["rules", word]) == 2
    err = capsys.readouterr().err
    assert f"did you mean {meant}?" in err and err.count("\n") == 1


def test_rules_of_a_category_or_prefix(capsys) -> None:
    assert main(["rules", "DS3", "--format", "json"]) == 0
    codes = [r["code"] for r in json.loads(capsys.readouterr().out)]
    assert codes and all(c.startswith("DS3") for c in codes)


# --------------------------------------------------------------------------- select / ignore

RULES = [RuleInfo("DS314", "stage3-16bit-weights-not-saved", "config"),
         RuleInfo("DS102", "loss-scale-collapse", "symptom")]


@pytest.mark.parametrize(("selector", "hits"), [
    ("DS314", ["DS314"]), ("ds3", ["DS314"]), ("DS", ["DS314", "DS102"]), ("ALL", ["DS314", "DS102"]),
    ("config", ["DS314"]), ("loss-scale-collapse", ["DS102"]), ("DS31", ["DS314"]), ("DS2", []),
])
def test_selectors_are_codes_prefixes_names_or_categories(selector, hits) -> None:
    assert [r.code for r in RULES if settings.matches(selector, r)] == hits


def test_select_and_ignore_on_the_command_line(alone, capsys) -> None:
    (alone / "ds.json").write_text(BOTH_PRECISIONS)
    _code, data = _json(capsys, ["analyze", "--config", "ds.json"])
    assert "DS308" in [f["rule"] for f in data["findings"]]
    for argv in (["--ignore", "DS308"], ["--ignore", "DS30"], ["--select", "DS1"],
                 ["--ignore", "fp16-and-bf16-enabled"]):
        code, data = _json(capsys, ["analyze", "--config", "ds.json", *argv])
        assert "DS308" not in [f["rule"] for f in data["findings"]], argv
    assert main(["analyze", "--config", "ds.json", "--ignore", "DS3O8"]) == 2
    err = capsys.readouterr().err
    assert "'DS3O8' names no rule" in err and "did you mean" in err and err.count("\n") == 1


def test_command_line_over_project_over_user(alone, capsys) -> None:
    (alone / "ds.json").write_text(BOTH_PRECISIONS)
    user = alone / "xdg" / "dsdoctor" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('ignore = ["DS308"]\n')
    rules = lambda: [f["rule"] for f in _json(capsys, ["analyze", "--config", "ds.json"])[1]["findings"]]  # noqa: E731
    assert "DS308" not in rules()  # the user's file
    (alone / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.dsdoctor]\nignore = ["DS1"]\n')
    assert "DS308" in rules()  # the project's ignore replaces the user's
    (alone / "sub").mkdir()
    (alone / "sub" / "ds.json").write_text(BOTH_PRECISIONS)
    (alone / "pyproject.toml").write_text('[tool.dsdoctor]\nignore = ["DS308"]\n')
    assert main(["analyze", "--config", str(alone / "ds.json"), "--format", "json"]) == 0
    capsys.readouterr()
    code, data = _json(capsys, ["analyze", "--config", "ds.json", "--ignore", "DS1"])
    assert "DS308" in [f["rule"] for f in data["findings"]]  # the command line wins
    (alone / "pyproject.toml").write_text('[tool.dsdoctor]\nignor = ["DS308"]\n')
    assert main(["analyze", "--config", "ds.json"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'ignor' in [tool.dsdoctor]" in err and err.count("\n") == 1


def test_the_nearest_pyproject_is_found_from_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.dsdoctor]\nselect = ["DS3", "symptom"]\n')
    (tmp_path / "a" / "b").mkdir(parents=True)
    chosen = settings.resolve(cwd=tmp_path / "a" / "b", user=tmp_path / "none.toml")
    assert chosen.select == ("DS3", "symptom") and chosen.ignore == ()


# --------------------------------------------------------------------------- inline suppression


def test_inline_suppression_in_a_json_with_comments_config(alone, capsys) -> None:
    (alone / "ds.json").write_text(
        '{\n  "train_batch_size": 8,\n  "fp16": {"enabled": true}, // dsdoctor: ignore[DS308]\n'
        '  "bf16": {"enabled": true}\n}\n')
    code, data = _json(capsys, ["analyze", "--config", "ds.json"])
    assert "DS308" not in [f["rule"] for f in data["findings"]] and code == 0
    (alone / "ds.json").write_text(
        '{\n  "train_batch_size": 8,\n  "fp16": {"enabled": true}, // dsdoctor: ignore[DS314]\n'
        '  "bf16": {"enabled": true}\n}\n')
    code, data = _json(capsys, ["analyze", "--config", "ds.json"])
    assert "DS308" in [f["rule"] for f in data["findings"]]  # another rule's comment: no effect


def test_inline_suppression_in_an_accelerate_yaml(alone, capsys) -> None:
    text = ('compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n'
            'mixed_precision: "true"{comment}\nnum_processes: 2\n')
    (alone / "acc.yaml").write_text(text.format(comment=""))
    _code, data = _json(capsys, ["analyze", "--config", "acc.yaml"])
    assert "DS324" in [f["rule"] for f in data["findings"]]
    (alone / "acc.yaml").write_text(text.format(comment="  # dsdoctor: ignore[DS324]"))
    _code, data = _json(capsys, ["analyze", "--config", "acc.yaml"])
    assert "DS324" not in [f["rule"] for f in data["findings"]]


# --------------------------------------------------------------------------- completion


def test_completion_scripts_name_every_command_and_option(capsys) -> None:
    cmds = commands(build_parser())
    names = {c.name for c in cmds}
    assert {"analyze", "report", "watch", "rules", "completion"} <= names
    for shell in ("bash", "zsh", "fish"):
        assert main(["completion", shell]) == 0
        script = capsys.readouterr().out
        for c in cmds:
            assert c.name in script, (shell, c.name)
            for o in c.options:
                long = [f for f in o.flags if f.startswith("--")]
                assert any((f if shell != "fish" else f"-l {f[2:]}") in script for f in long), \
                    (shell, c.name, o.flags)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_registers_and_completes(tmp_path: Path, capsys) -> None:
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "dsdoctor.bash"
    script.write_text(capsys.readouterr().out)
    probe = (f"source {script}; complete -p dsdoctor; "
             "COMP_WORDS=(dsdoctor analy); COMP_CWORD=1; _dsdoctor; echo \"${COMPREPLY[*]}\"; "
             "COMP_WORDS=(dsdoctor analyze --format ''); COMP_CWORD=3; _dsdoctor; "
             "echo \"${COMPREPLY[*]}\"; "
             "COMP_WORDS=(dsdoctor analyze --sel); COMP_CWORD=2; _dsdoctor; echo \"${COMPREPLY[*]}\"")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=120,
                         check=True).stdout.splitlines()
    assert out[0].endswith("-F _dsdoctor dsdoctor")
    assert out[1:] == ["analyze", "text json jsonl markdown", "--select"]


def test_preflight_headline_agrees_with_the_problems_shown(alone, capsys) -> None:
    """Seven "auto" keys without the Trainer: seven DS310 findings, one problem, one error; the
    rule's advice at the other keys is one ``also`` line naming them, not six identical ones."""
    (alone / "auto.json").write_text(
        '{\n  "train_batch_size": "auto",\n  "train_micro_batch_size_per_gpu": "auto",\n'
        '  "gradient_accumulation_steps": "auto",\n  "gradient_clipping": "auto",\n'
        '  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},\n'
        '  "fp16": {"enabled": "auto"},\n  "zero_optimization": {"stage": 2}\n}\n')
    (alone / "train.py").write_text(
        'import deepspeed\nmodel = None\nengine, *_ = deepspeed.initialize(model=model, config="auto.json")\n')
    assert main(["analyze", "--config", "auto.json", "--script", "train.py"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("PRE-FLIGHT FAILED: 1 error in the inputs; fix it before launching")
    assert "1 problem (1 error) from 7 findings and 0 symptom kinds" in out
    flat = " ".join(out.split())
    assert ("also: DS310 auto-without-trainer: the same at train_micro_batch_size_per_gpu, "
            "gradient_accumulation_steps, gradient_clipping, optimizer.params.lr, "
            "optimizer.params.weight_decay, fp16.enabled") in flat
    assert out.count("also:") == 1
