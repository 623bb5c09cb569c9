"""Cost cliffs (issue 14, item 10): work grows with the input, not with its square.

No timings: each test counts the work (bytes searched, calls of the costly function, positions
kept, findings built) on an input and on one twice as big, and checks that every match is still
counted. The OVERFLOW line copies DeepSpeed's loss_scaler.py format as printed in
sample_logs/fp16_loss_scale_collapse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdoctor.diagnose.checks import config_keys
from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.facts import configfile, dskeys
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs import aggregate, scan

OVERFLOW = ("[2026-11-21 11:52:23,738] [INFO] [loss_scaler.py:266:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}")


class _CountingBuffer(bytearray):
    """A bytearray that adds up how many bytes its find/rfind calls may look at."""

    searched = 0

    def find(self, sub, start=0, end=None):  # type: ignore[override]
        end = len(self) if end is None else end
        _CountingBuffer.searched += max(0, end - start)
        return super().find(sub, start, end)

    def rfind(self, sub, start=0, end=None):  # type: ignore[override]
        end = len(self) if end is None else end
        _CountingBuffer.searched += max(0, end - start)
        return super().rfind(sub, start, end)


def _segments_work(n_messages: int) -> int:
    """Bytes searched by _segment_at for every hit of a line of n OVERFLOW messages."""
    line = " ".join(OVERFLOW.format(a=65536, b=32768) for _ in range(n_messages)).encode()
    buf = _CountingBuffer(b"header\n" + line + b"\nfooter\n")
    hits = [i for i in range(len(buf)) if buf.startswith(b"OVERFLOW", i)]
    assert len(hits) == n_messages
    _CountingBuffer.searched = 0
    cur = None
    for off in hits:
        ls, ss, se, le = scan._segment_at(buf, off, len(buf), cur)
        cur = (ls, le)
        assert ls == 7 and le == 7 + len(line)
        assert ss <= off < se and se - ss <= 2 * scan.SEGMENT_WINDOW
    return _CountingBuffer.searched


def test_hits_in_one_huge_line_cost_linear_work() -> None:
    # before: every hit searched back to the line start and on to its end (n hits x line)
    small, big = _segments_work(2000), _segments_work(4000)
    assert big / small < 2.5


def test_segment_at_matches_the_plain_definition() -> None:
    """The bounded searches give the segment the unbounded definition gives."""
    w = scan.SEGMENT_WINDOW
    pieces = [b"a" * 10, b"\r", b"b" * (5 * w), b"\r", b"c" * 100, b"\n", b"d" * (9 * w), b"\n"]
    buf = bytearray(b"".join(pieces))
    for off in range(0, len(buf), 997):
        ls = buf.rfind(b"\n", 0, off) + 1
        nl = buf.find(b"\n", off)
        le = nl if nl != -1 else len(buf)
        ss = max(ls, buf.rfind(b"\r", ls, off) + 1)
        cr = buf.find(b"\r", off, le)
        se = cr if cr != -1 else le
        if se - ss > 4 * w:
            ss, se = max(ss, off - w), min(se, off + w)
        assert scan._segment_at(buf, off, len(buf)) == (ls, ss, se, le), off


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_evidence_is_cut_only_for_kept_lines(tmp_path: Path, monkeypatch) -> None:
    calls = {"n": 0}
    real = aggregate.cut_without_half_secret

    def spy(text: str, limit: int) -> str:
        calls["n"] += 1
        return real(text, limit)

    monkeypatch.setattr(aggregate, "cut_without_half_secret", spy)
    counts = []
    for n in (2000, 4000):
        lines = [OVERFLOW.format(a=2 ** (16 - i % 16), b=2 ** (15 - i % 16)) for i in range(n)]
        calls["n"] = 0
        res = scan.scan_files([_write(tmp_path / f"of{n}.log", lines)], engine="python")
        sym = res.symptoms["fp16-overflow"]
        assert sym.count == n  # every line counted
        assert sym.values["attempted_scale"]["count"] == n
        assert sym.values["attempted_scale"]["min"] == 2.0
        counts.append(calls["n"])
    # before: one cut per event (2000, 4000); now a constant handful per symptom kind
    assert counts[0] == counts[1] <= 3 * aggregate.MAX_EVIDENCE


def test_one_huge_line_is_matched_up_to_a_cap_and_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scan, "MAX_WINDOW_MATCHES_PER_LINE", 50)
    n = 400  # 400 messages x ~150 bytes: one segment far longer than 4 windows
    # without their timestamps: timestamped messages on one line are a flattened paste, which
    # paste.py splits back into lines before the scan (tests/test_paste.py)
    line = " ".join(OVERFLOW.split("] ", 1)[1].format(a=65536, b=32768) for _ in range(n))
    res = scan.scan_files([_write(tmp_path / "long.log", ["start", line, "end"])],
                          engine="hyperscan" if scan.hyperscan_available() else "python")
    sym = res.symptoms["fp16-overflow"]
    if res.engine == "python":  # one candidate per line and literal: nothing to cap
        assert sym.count == 1 and not res.notes
        return
    windowed = [n for n in res.notes if "without line breaks" in n]
    assert len(windowed) == 1 and f"{res.files[0].path}:2:" in windowed[0]
    assert "the first 50 were matched" in windowed[0]
    skipped = int(windowed[0].split(", ")[-1].split(" more")[0].split()[-1].replace(",", ""))
    assert sym.count + skipped <= n and sym.count >= 50
    assert skipped > 0


def test_config_array_positions_are_capped(tmp_path: Path) -> None:
    def parse(n: int) -> tuple[dict, dict]:
        text = json.dumps({"train_batch_size": 8, "table": list(range(n)),
                           "rows": [{"k": i} for i in range(n)]}, indent=1)
        data, positions, _ = configfile.parse_json(text, "ds.json")
        return data, positions

    data, pos_small = parse(1000)
    _, pos_big = parse(2000)
    assert data["table"] == list(range(1000)) and data["rows"][999] == {"k": 999}
    # object keys inside arrays keep their lines; array elements past the cap do not
    assert "rows[999].k" in pos_small and "table[999]" not in pos_small
    assert len(pos_big) - len(pos_small) == 1000  # grows with the keys only
    doc = configfile.ConfigDoc("ds.json", "deepspeed", data, pos_small, ())
    assert doc.locate("table[999]") == pos_small["table"]
    assert doc.locate("table[3]").line == pos_small["table"].line + 4


def _unknown_config(tmp_path: Path, n: int) -> str:
    cfg = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}
    cfg.update({f"unknown_key_{i}": i for i in range(n)})
    p = tmp_path / f"ds{n}.json"
    p.write_text(json.dumps(cfg, indent=2))
    return str(p)


def test_unknown_keys_bounded_findings_all_counted(tmp_path: Path, monkeypatch) -> None:
    calls = {"n": 0}
    real = dskeys.KeyTable.suggest

    def spy(self, key: str, section: str):
        calls["n"] += 1
        return real(self, key, section)

    monkeypatch.setattr(dskeys.KeyTable, "suggest", spy)
    shown = config_keys.MAX_UNKNOWN_SHOWN
    seen = []
    for n in (400, 800):
        calls["n"] = 0
        report = analyze(AnalysisInputs.of(configs=[_unknown_config(tmp_path, n)]))
        ds302 = [f for f in report.findings if f.rule == "DS302"]
        assert len(ds302) == shown + 1
        assert ds302[0].config_path == "unknown_key_0"
        more = ds302[-1]
        assert more.message.startswith(f"{n - shown:,} more keys DeepSpeed")
        assert f"'unknown_key_{shown}'" in more.message
        assert f"and {n - shown - 5:,} more" in more.message
        seen.append(calls["n"])
    # before: one difflib suggestion per unknown key and rule; now only for the keys shown
    assert seen[0] == seen[1] <= 2 * shown


def test_few_unknown_keys_keep_their_suggestions(tmp_path: Path) -> None:
    p = tmp_path / "ds.json"
    p.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4,
                             "zero_optimization": {"stage": 2, "overlap_com": True}}))
    report = analyze(AnalysisInputs.of(configs=[str(p)]))
    msgs = [f.message for f in report.findings if f.rule in ("DS302", "DS303")]
    assert len(msgs) == 1 and "Did you mean 'zero_optimization.overlap_comm'?" in msgs[0]


@pytest.mark.parametrize("n", [3000])
def test_aggregator_keeps_constant_memory(n: int) -> None:
    import tracemalloc

    from dsdoctor.model import Evidence

    def peak(count: int) -> int:
        agg = aggregate.SymptomAggregator()
        tracemalloc.start()
        for i in range(count):
            ev = Evidence("f.log", i + 1, OVERFLOW.format(a=i, b=i // 2) + " x" * 300, i % 8)
            agg.add("fp16-overflow", "ds-overflow", 1, ev, {"attempted_scale": float(i),
                                                           "rank": i % 8})
        built = agg.build()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert built["fp16-overflow"].count == count
        assert built["fp16-overflow"].values["attempted_scale"]["max"] == count - 1
        assert all(len(e.text) <= aggregate.EVIDENCE_CHARS + 1
                   for e in built["fp16-overflow"].evidence)
        return top

    assert peak(2 * n) < 1.5 * peak(n) + 64_000


def test_report_excerpt_reads_only_the_lookback_window(tmp_path: Path, monkeypatch) -> None:
    from dsdoctor.render import issue_log

    # torch.OutOfMemoryError as printed by torch 2.x (sample_logs/gpu_cuda_oom)
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
           "total capacity of 79.15 GiB of which 1.06 GiB is free.")
    noise = "[rank1]:node-0:12001:12401 [1] NCCL INFO Channel 03/0 : 1[1] -> 2[2] via P2P/IPC/read"
    real = issue_log._iter_raw
    yielded = {"n": 0}

    def spy(path: str, start: int = 1, repairs=None):
        for item in real(path, start, repairs):
            yielded["n"] += 1
            yield item

    monkeypatch.setattr(issue_log, "_iter_raw", spy)
    seen = []
    for n in (20_000, 40_000):
        path = _write(tmp_path / f"r{n}.log", [noise] * (n - 1) + [oom])
        yielded["n"] = 0
        ex = issue_log.first_error_excerpt([path], anchor=(path, n))
        assert ex is not None and ex.error_line == n and "OutOfMemoryError" in ex.error
        seen.append(yielded["n"])
        # the same excerpt as reading every line
        monkeypatch.setattr(issue_log, "_iter_raw", lambda p, start=1, repairs=None: real(p, 1, repairs))
        assert issue_log.first_error_excerpt([path], anchor=(path, n)) == ex
        monkeypatch.setattr(issue_log, "_iter_raw", spy)
    # before: every line of the log went through the line reader (20,000 then 40,000)
    assert seen[0] == seen[1] <= issue_log._LOOKBACK + 1


def test_report_quotes_a_huge_config_in_part_redacted_once(tmp_path: Path, monkeypatch) -> None:
    from dsdoctor.redact.redactor import Redactor
    from dsdoctor.render import issue_asks

    redacted = {"chars": 0}
    real = Redactor.text

    def spy(self, text: str) -> str:
        redacted["chars"] += len(text)
        return real(self, text)

    monkeypatch.setattr(Redactor, "text", spy)
    token = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"  # a Hugging Face token's shape
    seen = []
    for n in (20_000, 40_000):
        cfg = {"train_micro_batch_size_per_gpu": 4, "hub_token": token,
               "data": [[i, i * 0.5] for i in range(n)]}
        p = tmp_path / f"big{n}.json"
        p.write_text(json.dumps(cfg, indent=1))
        total_lines = p.read_text().count("\n") + 1
        redacted["chars"] = 0
        quoted = issue_asks.read_config(str(p), Redactor())
        seen.append(redacted["chars"])
        body = quoted.text.splitlines()
        assert len(body) == issue_asks.MAX_QUOTED_CONFIG_LINES + 1
        assert body[-1] == (f"// dsdoctor: the first {issue_asks.MAX_QUOTED_CONFIG_LINES:,} of "
                            f"{total_lines:,} lines ({len(p.read_text()):,} characters) are "
                            "quoted; attach the file for the rest")
        assert token not in quoted.text and '"train_micro_batch_size_per_gpu": 4' in quoted.text
    # before: the whole file was redacted (and quoted); now the quoted part and a margin
    assert seen[0] == seen[1] < 200_000


def test_small_config_is_quoted_whole(tmp_path: Path) -> None:
    from dsdoctor.redact.redactor import Redactor
    from dsdoctor.render import issue_asks

    p = tmp_path / "ds.json"
    text = json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}},
                      indent=2)
    p.write_text(text)
    assert issue_asks.read_config(str(p), Redactor()).text == text


_SCRIPT_HEAD = '''import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

DTYPE = torch.float16
'''
_SCRIPT_BLOCK = '''

def preprocess_{i}(batch, tokenizer=None):
    """Tokenize one shard ({i})."""
    out = tokenizer([t.strip() for t in batch["text"] if t], truncation=True)
    return out
'''
_SCRIPT_TAIL = '''
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=DTYPE)
args = TrainingArguments(output_dir="out", bf16=True, deepspeed="ds_config.json")
trainer = Trainer(model=model, args=args)
'''


def _script(blocks: int, middle: str = "") -> str:
    body = "".join(_SCRIPT_BLOCK.format(i=i) for i in range(blocks))
    return _SCRIPT_HEAD + body + middle + body.replace("preprocess_", "again_") + _SCRIPT_TAIL


def test_big_script_is_analyzed_in_pieces_with_the_same_facts(monkeypatch) -> None:
    import tracemalloc

    from dsdoctor.facts import scriptcheck

    monkeypatch.setattr(scriptcheck, "_CHUNK_CHARS", 4096)
    monkeypatch.setattr(scriptcheck, "CHUNKED_SOURCE_BYTES", 10_000)
    src = _script(400)
    tracemalloc.start()
    chunked = scriptcheck.check_source(src, "train.py")
    _, peak_chunked = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert chunked.dtypes and chunked.from_pretrained[0].line == src.count("\n") - 2
    monkeypatch.setattr(scriptcheck, "CHUNKED_SOURCE_BYTES", 1 << 40)
    tracemalloc.start()
    whole = scriptcheck.check_source(src, "train.py")
    _, peak_whole = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert chunked == whole
    assert peak_chunked < peak_whole / 3  # one piece's tree alive at a time


def test_a_cut_inside_a_string_falls_back_to_the_whole_parse(monkeypatch) -> None:
    from dsdoctor.facts import scriptcheck

    monkeypatch.setattr(scriptcheck, "_CHUNK_CHARS", 4096)
    monkeypatch.setattr(scriptcheck, "CHUNKED_SOURCE_BYTES", 10_000)
    middle = 'NOTES = """\n' + "".join(f"line_{i} = {i}\n" for i in range(2000)) + '"""\n'
    src = _script(100, middle)
    assert scriptcheck._check_in_chunks(src, "train.py") is None  # a piece is not Python
    facts = scriptcheck.check_source(src, "train.py")
    monkeypatch.setattr(scriptcheck, "CHUNKED_SOURCE_BYTES", 1 << 40)
    assert facts == scriptcheck.check_source(src, "train.py")
