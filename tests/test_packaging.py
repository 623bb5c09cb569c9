"""The wheel ships every package of the tree: pyproject.toml lists packages by hand (rules/ is
mapped into dsdoctor.rules), and an editable install hides a missing entry until a real one."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the packaging is the same on 3.10

REPO = Path(__file__).resolve().parents[1]


def test_every_package_under_dsdoctor_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "dsdoctor").rglob("__init__.py")}
    assert tree - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    mapped = set(config["tool"]["setuptools"].get("package-dir", {}))
    assert listed - tree - mapped == set(), "pyproject.toml lists packages that do not exist"


def test_every_data_file_kind_is_shipped() -> None:
    # YAML data (formats, rules, secret formats) must be in the wheel's package data
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    data = config["tool"]["setuptools"]["package-data"]
    for yaml_file in (REPO / "dsdoctor").rglob("*.yaml"):
        package = ".".join(yaml_file.parent.relative_to(REPO).parts)
        assert package in data and any(yaml_file.match(g) for g in data[package]), yaml_file
