"""A token hard-wrapped across log lines (a terminal or a paste wrapping a long line at 80, 100 or
120 columns) never reaches the output in part (issue 24, item 6): the scanner joins a line's
edge with its neighbour's where a token could continue (redact_wrapped_line), at every split
point of every current token shape of the corpus, in analyze (text, JSON, Markdown) and watch
--plain; ordinary wrapped text is left as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_redact_corpus import TOKENS
from test_redact_formats import leaked

from dsdoctor.logs import scan
from dsdoctor.redact import redact_text
from dsdoctor.redact.redactor import redact_wrapped_line

ROOT = Path(__file__).resolve().parents[1]
BASE = "[rank0]: ValueError: bad credentials"


def wrapped_at(token: str, split: int, width: int) -> list[str]:
    """The physical lines of one logical error line whose ``split``-th character of ``token``
    starts a new line when the line is wrapped at ``width`` columns."""
    fill = " " * ((-(len(BASE) + 1 + split)) % width)
    line = f"{BASE} {fill}{token} for upload"
    return [line[i:i + width] for i in range(0, len(line), width)]


def _events(path: Path) -> list[str]:
    """Each event's evidence and values as the outputs print them: redacted one by one."""
    out: list[str] = []
    scan.scan_files([str(path)], on_event=lambda kind, ev, values: out.append(
        redact_text(ev.text + " " + json.dumps(values))))
    return out


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_split_point_of_every_token_is_redacted_in_the_events(tmp_path: Path,
                                                                     width: int) -> None:
    lines: list[str] = []
    cases = 0
    for token, _ in TOKENS.values():
        for split in range(1, len(token)):
            lines += wrapped_at(token, split, width)
            cases += 1
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    events = _events(log)
    assert sum("bad credentials" in e for e in events) >= cases  # every case is an event
    text = "\n".join(events)
    bad = {shape: leaked(token, text)[:1] for shape, (token, _) in TOKENS.items()
           if leaked(token, text)}
    assert not bad, bad


def test_ordinary_wrapped_text_and_hashes_stay() -> None:
    line = "ValueError: checkpoint 0123456789abcdef0123456789abcdef01234567 has a"
    after = "different_layer_count_than_the_model_config_expects_for_this_run and stops"
    before = "[rank0]: while_loading_the_sharded_checkpoint_from_the_output_directory"
    assert redact_wrapped_line(line, before, after) == line
    assert redact_wrapped_line(after, line, "") == after


def test_a_token_wrapped_across_a_chunk_cut_is_redacted(tmp_path: Path, monkeypatch) -> None:
    token = TOKENS["huggingface"][0]
    # the event is the second line, which starts with the token's second half
    first, second = f"[rank0]: login with {token[:17]}", f"{token[17:]} RuntimeError: upload failed"
    monkeypatch.setattr(scan, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(scan, "LOOKAHEAD_BYTES", 4 << 10)
    # the first chunk is cut at the last line start before CHUNK - LOOKAHEAD bytes: the second
    # half of the token starts the second chunk, its first half ends the first
    start = scan.CHUNK_BYTES - scan.LOOKAHEAD_BYTES - 5
    pad = start - len(first) - 1
    head = "x" * 99 + "\n"
    filler = head * (pad // 100 - 1) + "y" * (pad % 100 + 99) + "\n"
    log = tmp_path / "train.log"
    log.write_text(filler + first + "\n" + second + "\n" + head * 100)  # past one chunk
    assert log.read_bytes().index(second.encode()) == start
    text = "\n".join(_events(log))
    assert "upload failed" in text and not leaked(token, text), text


def _cli(*argv: str) -> str:
    r = subprocess.run([sys.executable, "-m", "dsdoctor", *argv], capture_output=True, text=True,
                       timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode in (0, 1), r.stderr[-1000:]
    return r.stdout + r.stderr


def test_analyze_and_watch_print_no_wrapped_token(tmp_path: Path) -> None:
    lines: list[str] = []
    for token, _ in TOKENS.values():
        for split in (1, 3, 20, len(token) // 2, len(token) - 1):
            lines += wrapped_at(token, split, 80)
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    outs = {fmt: _cli("analyze", str(log), "--format", fmt, "--color", "never")
            for fmt in ("text", "json", "markdown")}
    outs["watch --plain"] = _cli("watch", str(log), "--plain", "--exit-on-idle", "0")
    for where, out in outs.items():
        assert "bad credentials" in out, where
        bad = {s: leaked(t, out)[:1] for s, (t, _) in TOKENS.items() if leaked(t, out)}
        assert not bad, (where, bad)
