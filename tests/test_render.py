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
