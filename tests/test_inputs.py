"""Typed inputs (facts/inputs.py): argparse stays in the CLI, each input file is read once."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import dsdoctor
from dsdoctor.cli.main import build_parser
from dsdoctor.cli.options import inputs_from
from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs, cache_stats, cached, clear_cache

PACKAGE = Path(dsdoctor.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_argparse_only_in_the_cli():
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if p.relative_to(PACKAGE).parts[0] != "cli" and "argparse" in _imports(p)]
    assert offenders == []
    assert "argparse" in _imports(PACKAGE / "cli" / "options.py")  # the check sees real imports


def test_cli_namespace_becomes_frozen_inputs():
    args = build_parser().parse_args(["analyze", "a.log", "--config", "ds.json", "--script",
                                      "run.sh", "--env", "env.json", "--engine", "python"])
    got = inputs_from(args)
    assert got == AnalysisInputs(logs=("a.log",), configs=("ds.json",), env="env.json",
                                 scripts=("run.sh",), engine="python")
    watch = inputs_from(build_parser().parse_args(["watch", "live.log"]))
    assert watch.logs == ("live.log",)


def test_each_config_is_read_once_until_it_changes(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    clear_cache()
    inp = AnalysisInputs.of(configs=[str(cfg)])
    first = build_context(inp)
    second = build_context(inp)  # watch's refresh, report's second look
    assert first.ds is second.ds
    # two loads: the file's bytes and their parse (report quotes the same bytes); then one hit
    assert cache_stats() == {"loads": 2, "hits": 1}
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3}}, indent=2))
    os.utime(cfg, ns=(1, 1))  # a different mtime even on a coarse clock
    third = build_context(inp)
    assert third.run.zero_stage.value == 3 and cache_stats()["loads"] == 4


def test_a_failing_load_is_not_cached(tmp_path):
    clear_cache()
    bad = tmp_path / "x.json"
    bad.write_text("{")

    def loader(path: str) -> None:
        raise ValueError(path)

    for _ in range(2):
        try:
            cached("config", str(bad), loader)
        except ValueError:
            pass
    assert cache_stats() == {"loads": 0, "hits": 0}


def test_watch_refreshes_do_not_reread_unchanged_inputs(tmp_path):
    from dsdoctor.watch.tailer import Tailer

    log = tmp_path / "train.log"
    log.write_text("starting\n")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    script = tmp_path / "run.sh"
    script.write_text("deepspeed --num_gpus 2 train.py --deepspeed ds.json\n")
    clear_cache()
    tailer = Tailer(str(log), AnalysisInputs.of(logs=[str(log)], configs=[str(cfg)],
                                                scripts=[str(script)], engine="python"))
    for _ in range(5):
        tailer.poll()
        assert tailer.snapshot().error == ""
    # config, script bytes, launch commands: parsed once, then four cache hits each
    assert cache_stats() == {"loads": 4, "hits": 12}  # the config's bytes are one more load
