"""Renderers say which inputs the analysis used (and which it lacked)."""

from __future__ import annotations

from pathlib import Path

from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.render.analysis import render_markdown, render_text

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "cpu_offload_oom_killed"


def _unwrapped(text: str) -> str:
    """The text with rich's line wrapping undone (the inputs are one wrapped paragraph)."""
    return " ".join(text.split())


def test_text_and_markdown_name_the_environment_used():
    with_env = run_analysis([str(SAMPLE / "train.log")], configs=[str(SAMPLE / "ds_config.json")],
                            env=str(SAMPLE / "env.json"))
    text = _unwrapped(render_text(with_env, color=False, width=400))
    assert f"environment: {SAMPLE / 'env.json'}" in text
    assert f"config: {SAMPLE / 'ds_config.json'}" in text
    assert "DeepSpeed release linted against: 0.19.8 (from env)" in text
    assert f"environment: {SAMPLE / 'env.json'}" in render_markdown(with_env)


def test_missing_environment_says_which_flag_supplies_it():
    without = run_analysis([str(SAMPLE / "train.log")])
    text = _unwrapped(render_text(without, color=False))
    assert "environment: not given (--env FILE" in text
    assert "config: rebuilt from the log" in text or "config:" not in text


def test_json_puts_each_timeline_point_on_one_line():
    import json

    from dsdoctor.render.analysis import _clean, render_json

    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "fp16_loss_scale_collapse"
    report = run_analysis([str(sample / "train.log")])
    text = render_json(report)
    # the same document as the plainly indented one (NaN and all, as strings)
    assert json.loads(text) == json.loads(json.dumps(_clean(report.to_dict()), indent=2))
    lines = text.splitlines()
    start = lines.index('  "timeline": [')
    rows = lines[start + 1:start + 1 + len(report.timeline)]
    assert len(report.timeline) > 3
    assert all(r.startswith('    {"file": ') and r.rstrip(",").endswith("}") for r in rows)
    assert lines[start + 1 + len(report.timeline)] == "  ],"
    # a report without a timeline keeps the plain layout
    empty = run_analysis([], configs=[str(sample / "ds_config.json")])
    assert '"timeline": []' in render_json(empty)
