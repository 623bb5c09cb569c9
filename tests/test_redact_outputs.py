"""No planted secret of any format survives any output path: ``analyze`` (text, JSON, Markdown),
``report``, ``watch --plain`` and the environment variables of ``env``.

The log lines copy real formats: a Python traceback as torch's elastic agent prints it with rank
prefixes, and the DeepSpeed launcher's ``cmd = ...`` line (sample_logs/fp16_loss_scale_collapse/
train.log); the secrets are the real-shape samples of dsdoctor/redact/secret_formats.yaml.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_redact_formats import CONTEXTS, NAMED, leaked

from dsdoctor.cli.main import main
from dsdoctor.facts.envinfo import relevant_env
from dsdoctor.redact import secret_formats
from dsdoctor.render.env import render_markdown

SAMPLES = [(f.id, s) for f in secret_formats() for s in f.samples if not f.whole_line]
# key material on lines of its own (a PEM body), planted as raw lines inside the traceback
LINE_SAMPLES = [s for f in secret_formats() for s in f.samples if f.whole_line]
LAUNCHER = ("[2026-11-21 11:40:09,632] [INFO] [runner.py:618:main] cmd = /usr/bin/python3 -u -m "
            "deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 "
            "--master_addr=127.0.0.1 --master_port=29500 train.py --deepspeed ds_config.json")


def _one_line(text: str) -> str:
    # a planted multi-line sample (a PEM block) stays one log line here, as JSON-escaped text
    return text.replace("\n", "\\n")


def _log(tmp: Path, planted: list[str], raw: list[str] = ()) -> Path:
    """A rank-prefixed traceback whose frames and exception line carry the planted texts."""
    lines = [LAUNCHER, "[rank0]: Traceback (most recent call last):", *raw]
    for i, p in enumerate(planted):
        lines += [f'[rank0]:   File "/opt/app/train.py", line {10 + i}, in <module>',
                  f"[rank0]:     upload({_one_line(p)!r})"]
    lines.append(f"[rank0]: RuntimeError: upload failed: {_one_line(planted[0])}")
    lines += [f"[rank1]: ValueError: bad credentials {_one_line(p)}" for p in planted]
    path = tmp / "train.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(argv)
    return out.getvalue() + err.getvalue()


def _assert_clean(output: str, secrets: list[str], where: str, words: list[str] = ()) -> None:
    bad = {s[:12]: leaked(s, output)[:2] for s in secrets if leaked(s, output)}
    bad.update({w: [w] for w in words if w in output})  # each word of a multi-word value
    assert not bad, (where, bad)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_analyze_never_prints_a_secret(tmp_path: Path, fmt: str) -> None:
    # each sample on the exception line that analyze quotes as evidence, one run per sample
    for fid, s in SAMPLES:
        log = _log(tmp_path, [CONTEXTS["plain"](s.text)])
        out = _run(["analyze", str(log), "--format", fmt])
        assert "upload failed" in out, out[:400]  # the evidence line is quoted ...
        _assert_clean(out, [s.secret_text], f"analyze {fmt} {fid}")  # ... without its secret


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SAMPLES), st.sampled_from(sorted(CONTEXTS)),
       st.sampled_from(["text", "json", "markdown"]))
def test_analyze_property_any_format_any_context(tmp_path: Path, sample: tuple, context: str,
                                                 fmt: str) -> None:
    _, s = sample
    log = _log(tmp_path, [CONTEXTS[context](s.text)])
    _assert_clean(_run(["analyze", str(log), "--format", fmt]), [s.secret_text], context)


def _in_contexts(shift: int) -> list[str]:
    """Every sample, each in one of the contexts (in turn, so all contexts are used)."""
    names = sorted(CONTEXTS)
    return [CONTEXTS[names[(i + shift) % len(names)]](s.text) for i, (_, s) in enumerate(SAMPLES)]


@pytest.mark.parametrize("shift", [0, 5])
def test_report_never_prints_a_secret(tmp_path: Path, shift: int) -> None:
    planted = _in_contexts(shift) + [p for p, _ in NAMED]
    secrets = [s.secret_text for _, s in SAMPLES]
    words = [w for _, ws in NAMED for w in ws]
    log = _log(tmp_path, planted, [s.text for s in LINE_SAMPLES])
    secrets += [s.secret_text for s in LINE_SAMPLES]
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "notes": planted[:40],
                               "comet": {"api_key": "Cm3tPlainValue"}}, indent=2))
    env = tmp_path / "env.json"
    env.write_text(json.dumps({"schema_version": 1, "packages": {"torch": "2.3.1"}, "env_vars": {
        **{f"NCCL_NOTE_{i}": p for i, p in enumerate(planted)}, "HF_TOKEN": "PlainHfValue99"}}))
    out = tmp_path / "issue.md"
    msg = _run(["report", str(log), "--config", str(cfg), "--env", str(env), "-o", str(out)])
    assert out.exists(), msg
    body = out.read_text(encoding="utf-8")
    assert "upload failed" in body and "<redacted>" in body
    _assert_clean(body, secrets + ["Cm3tPlainValue", "PlainHfValue99"], "report", words)


@pytest.mark.parametrize("shift", [0, 7])
def test_watch_plain_never_prints_a_secret(tmp_path: Path, shift: int) -> None:
    planted = _in_contexts(shift)
    log = _log(tmp_path, planted)
    out = _run(["watch", str(log), "--plain", "--exit-on-idle", "0"])
    assert out.count("ValueError: bad credentials") >= len(planted) // 2, out[:500]
    _assert_clean(out, [s.secret_text for _, s in SAMPLES], "watch --plain")


def test_watch_plain_redacts_before_cutting_at_200(tmp_path: Path) -> None:
    # a token that straddles character 200 of the event line: cut-then-redact printed half of it
    tokens = [s.text for fid, s in SAMPLES if s.text == s.secret_text and len(s.text) >= 30]
    lines = []
    for t in tokens:
        pad = "x" * max(0, 180 - len("[rank1]: ValueError: "))
        lines.append(f"[rank1]: ValueError: {pad} {t}")
    log = tmp_path / "long.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = _run(["watch", str(log), "--plain", "--exit-on-idle", "0"])
    assert "ValueError" in out
    _assert_clean(out, tokens, "watch --plain cut")


def test_env_vars_never_show_a_secret() -> None:
    environ = {f"NCCL_NOTE_{i}": CONTEXTS["plain"](s.text) for i, (_, s) in enumerate(SAMPLES)}
    environ.update({"HF_TOKEN": "any value at all", "NCCL_DEBUG": "INFO", "WANDB_API_KEY": "k" * 40,
                    "HF_HUB_OFFLINE": "1"})
    env = relevant_env(environ)
    assert env["NCCL_DEBUG"] == "INFO" and env["HF_HUB_OFFLINE"] == "1"
    text = render_markdown({"env_vars": env}) + json.dumps(env)
    _assert_clean(text, [s.secret_text for _, s in SAMPLES] + ["any value at all", "k" * 40], "env")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_evidence_cut_at_500_keeps_no_half_token(tmp_path: Path, fmt: str) -> None:
    # the scanner cuts an evidence line at 500 characters; a token across the cut kept its first
    # half, too short for any format to recognise afterwards
    token = "ghp_" + "Q9w8E7r6T5y4U3i2O1p0A9s8D7f6G5h4J3k2L1"
    head = "[rank0]: RuntimeError: upload failed: " + "detail " * 65
    line = head[:496] + " " + token + " tail"
    assert line.index(token) < 500 < line.index(token) + len(token)
    log = tmp_path / "long.log"
    log.write_text(LAUNCHER + "\n" + line + "\n", encoding="utf-8")
    out = _run(["analyze", str(log), "--format", fmt])
    assert "upload failed" in out
    assert token[:3] + "_" + token[4:7] not in out and token[:7] not in out, out
