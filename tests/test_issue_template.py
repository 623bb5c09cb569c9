"""dsdoctor issue-template: the shipped form obeys GitHub's issue-form rules; the validator catches
each kind of violation; the command writes, refuses to overwrite, and --force overwrites."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dsdoctor.cli.main import main
from dsdoctor.render.issue_form import DEFAULT_PATH, load_form, template_text, validate_form


@pytest.fixture
def form() -> dict:
    return load_form(template_text())


def test_shipped_form_is_valid_and_asks_for_what_maintainers_need(form: dict) -> None:
    assert validate_form(form) == []
    text = template_text()
    assert "dsdoctor env --format markdown" in text
    assert "dsdoctor analyze" in text and "--format markdown" in text
    ids = {el.get("id") for el in form["body"]}
    assert {"dsdoctor-env", "dsdoctor-analyze", "config", "launch-command"} <= ids
    required = {el["id"] for el in form["body"]
                if el.get("validations", {}).get("required")}
    assert {"dsdoctor-env", "dsdoctor-analyze", "config", "launch-command"} <= required


def _broken(form: dict, path: list, value=None, delete: bool = False) -> dict:
    f = copy.deepcopy(form)
    node = f
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return f


def _idx(form: dict, typ: str) -> int:
    return next(i for i, el in enumerate(form["body"]) if el["type"] == typ)


@pytest.mark.parametrize("mutate,expected", [
    (lambda f: _broken(f, ["name"], delete=True), "missing top-level key 'name'"),
    (lambda f: _broken(f, ["description"], delete=True), "missing top-level key 'description'"),
    (lambda f: _broken(f, ["body"], delete=True), "missing top-level key 'body'"),
    (lambda f: _broken(f, ["body"], []), "'body' must be a non-empty list"),
    (lambda f: _broken(f, ["name"], ""), "'name' must be a non-empty string"),
    (lambda f: _broken(f, ["bogus"], 1), "unknown top-level key 'bogus'"),
    (lambda f: _broken(f, ["labels"], [1, 2]), "'labels' must be a string or a list of strings"),
    (lambda f: _broken(f, ["body", 1, "type"], "select"), "type must be one of"),
    (lambda f: _broken(f, ["body", 2, "id"], f["body"][1]["id"]), "duplicate id"),
    (lambda f: _broken(f, ["body", 1, "id"], "has space"), "id must contain only"),
    (lambda f: _broken(f, ["body", 1, "attributes", "label"], delete=True), "attributes.label is required"),
    (lambda f: _broken(f, ["body", 1, "attributes"], delete=True), "'attributes' is required"),
    (lambda f: _broken(f, ["body", 2, "attributes", "label"], f["body"][1]["attributes"]["label"]),
     "duplicate label"),
    (lambda f: _broken(f, ["body", 1, "validations", "required"], "yes"), "validations.required must be true or false"),
    (lambda f: _broken(f, ["body", 1, "validations", "minimum"], 1), "validations may only hold 'required'"),
    (lambda f: _broken(f, ["body", 0, "attributes", "value"], delete=True), "attributes.value is required"),
    (lambda f: _broken(f, ["body", 0, "id"], "intro"), "markdown elements take no id"),
    (lambda f: _broken(f, ["body", 0, "validations"], {"required": True}), "markdown elements take no validations"),
    (lambda f: _broken(f, ["body", _idx(f, "dropdown"), "attributes", "options"], []), "options must be a non-empty list"),
    (lambda f: _broken(f, ["body", _idx(f, "dropdown"), "attributes", "options"], ["a", "a"]), "options must be distinct"),
    (lambda f: _broken(f, ["body", _idx(f, "dropdown"), "attributes", "options"], ["a", "None"]), "'None' is reserved"),
    (lambda f: _broken(f, ["body", _idx(f, "dropdown"), "attributes", "default"], 99), "default must be the index"),
    (lambda f: _broken(f, ["body", _idx(f, "checkboxes"), "attributes", "options"], [{"required": True}]),
     "needs a non-empty label"),
    (lambda f: _broken(f, ["body", _idx(f, "textarea"), "attributes", "options"], ["x"]),
     "attribute 'options' is not allowed for textarea"),
    (lambda f: _broken(f, ["body"], [{"type": "markdown", "attributes": {"value": "hi"}}]),
     "at least one non-markdown element"),
])
def test_validator_catches_each_rule(form: dict, mutate, expected: str) -> None:
    errs = validate_form(mutate(form))
    assert any(expected in e for e in errs), errs


def test_validator_accepts_the_shape_of_real_project_forms() -> None:
    # The element shapes used by Transformers' and Accelerate's bug-report.yml (textarea with
    # render, checkboxes without `required`, textarea with validations before attributes).
    form = yaml.safe_load("""
name: "\\U0001F41B Bug Report"
description: Submit a bug report
body:
  - type: textarea
    id: system-info
    attributes:
      label: System Info
      render: Shell
      placeholder: versions
    validations:
      required: true
  - type: checkboxes
    id: information-scripts-examples
    attributes:
      label: Information
      description: 'The problem arises when using:'
      options:
        - label: "The official example scripts"
        - label: "My own modified scripts"
  - type: textarea
    id: reproduction
    validations:
      required: true
    attributes:
      label: Reproduction
""")
    assert validate_form(form) == []


def test_cli_writes_default_path_and_refuses_to_overwrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".git").mkdir()  # a repository: its .github/ gets the form
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")
    assert main(["issue-template"]) == 0
    written = tmp_path / DEFAULT_PATH
    assert validate_form(yaml.safe_load(written.read_text())) == []
    written.write_text("# the user's own form\n")
    capsys.readouterr()
    assert main(["issue-template"]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err and err.count("\n") == 1
    assert written.read_text() == "# the user's own form\n"  # untouched
    assert main(["issue-template", "--force"]) == 0
    assert written.read_text() == template_text()


def test_cli_asks_for_output_outside_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["issue-template"]) == 2
    err = capsys.readouterr().err
    assert "not inside a git repository" in err and "-o" in err and err.count("\n") == 1
    assert not (tmp_path / ".github").exists()


def test_cli_output_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "forms" / "x.yml"
    assert main(["issue-template", "--output", str(out)]) == 0
    assert out.read_text() == template_text()
    out.write_text("old")
    assert main(["issue-template", "-o", str(out)]) == 0  # -o FILE replaces it
    assert out.read_text() == template_text()
    assert main(["issue-template", "-o", "-"]) == 0
    assert capsys.readouterr().out == template_text()
    assert main(["issue-template", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_no_output_tells_people_to_install_an_unpublished_package(tmp_path: Path) -> None:
    # dsdoctor is not on PyPI: neither the form nor a report may send people there.
    from dsdoctor.diagnose.pipeline import run_analysis
    from dsdoctor.render.issue_body import build_issue

    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "fp16_loss_scale_collapse"
    log = str(next(sample.glob("*.log")))
    issue = build_issue(target="deepspeed", report=run_analysis([log]), logs=[log])
    assert "Generated with dsdoctor" in issue.body
    for text in (template_text(), issue.body):
        assert "pip install dsdoctor" not in text
        assert "pypi.org/project/dsdoctor" not in text
    assert "clone" in template_text() and "pip install ." in template_text()
