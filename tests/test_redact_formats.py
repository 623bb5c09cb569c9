"""Every secret format of dsdoctor/redact/secret_formats.yaml, planted in every context, vanishes;
its negatives (the evidence dsdoctor quotes) stay exactly as they are."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dsdoctor.redact import REDACTED, Redactor, redact_text, secret_formats
from dsdoctor.redact.formats import Sample

FORMATS = secret_formats()
SAMPLES = [(f.id, i, s) for f in FORMATS for i, s in enumerate(f.samples) if not f.whole_line]
# formats that are a line on their own (PEM body lines in an excerpt that starts inside a key)
LINE_SAMPLES = [(f.id, i, s) for f in FORMATS for i, s in enumerate(f.samples) if f.whole_line]

# Secret-named values of any shape (item 2 of issue 14): (planted text, words that must vanish).
NAMED = [
    ("password: correct horse battery staple", ["correct", "horse", "battery", "staple"]),
    ('{"db_password": "correct horse battery staple"}', ["correct", "horse", "battery", "staple"]),
    ("--hub_token 'spaced Qx7wordA Qx7wordB'", ["spaced", "Qx7wordA", "Qx7wordB"]),
    ("export HF_TOKEN=PlainHubValue1234", ["PlainHubValue1234"]),
    ("hub_token=PlainHubValue1234, hub_strategy=every_save", ["PlainHubValue1234"]),
    ("MY_SERVICE_API_KEY=zz9-not-a-known-shape", ["zz9-not-a-known-shape"]),
    ("'--hub_token', 'ArgvTokenValue42'", ["ArgvTokenValue42"]),
    ("api_key: 'short1'", ["short1"]),
    ("KAGGLE_KEY=0a1b2c3d4e5f60718293a4b5c6d7e8f9", ["0a1b2c3d4e5f60718293a4b5c6d7e8f9"]),
    ("https://host/cb?access_token=QueryTok3nValue&x=1", ["QueryTok3nValue"]),
    ("client_secret%3DEncodedSecretValue9", ["EncodedSecretValue9"]),
    ('"AccountKey": "Zm9vYmFyYmF6cXV4"', ["Zm9vYmFyYmF6cXV4"]),
    ("//registry.npmjs.org/:_authToken=NpmrcTok3n", ["NpmrcTok3n"]),
    ("Cookie: session=CookieValue123; theme=dark", ["CookieValue123"]),
    ("X-Api-Key: HeaderKeyValue77", ["HeaderKeyValue77"]),
]


def fragments(secret: str) -> list[str]:
    """What must not survive of a secret: every 10-character window of its alphanumeric runs
    (so half a token is caught too; URL or JSON escaping leaves these runs intact)."""
    out = []
    for run in re.findall(r"[A-Za-z0-9]{6,}", secret):
        width = min(len(run), 10)
        out += [run[i:i + width] for i in range(len(run) - width + 1)]
    return out


def leaked(secret: str, output: str) -> list[str]:
    return [f for f in fragments(secret) if f in output]


# Contexts in which a secret reaches dsdoctor: glued to CJK text, "%3D", "\n" or "_", quoted,
# URL-encoded, inside JSON, a traceback, a config and a launcher argv list.
CONTEXTS: dict[str, Callable[[str], str]] = {
    "plain": lambda t: f"[2024-05-01 10:00:00,000] [INFO] using {t} for upload",
    "cjk": lambda t: f"使用令牌{t}上传模型",
    "pct3D": lambda t: f"GET /cb?state%3D{t}%26next HTTP/1.1",
    "escaped-newline": lambda t: f"msg = 'line one\\n{t}\\nline three'",
    "underscore": lambda t: f"X_{t}_Y",
    "double-quoted": lambda t: f'value="{t}"',
    "single-quoted": lambda t: f"value='{t}'",
    "url-encoded": lambda t: "https://example.com/login?next=" + quote(t, safe="") + "&lang=en",
    "json": lambda t: json.dumps({"event": "upload", "detail": t}),
    "traceback": lambda t: ("Traceback (most recent call last):\n"
                            '  File "/opt/app/train.py", line 12, in <module>\n'
                            "    push(model)\n"
                            f"RuntimeError: push failed for {t}"),
    "config": lambda t: f"wandb:\n  project: demo\n  notes: {t}\n",
    "argv": lambda t: repr(["/usr/bin/python3", "-u", "train.py", "--notes", t, "--bf16"]),
    "rank-prefix": lambda t: f"[rank3]: {t}",
    # escaped twice: a JSON string printed inside a Python list (a logged argv of a logged line)
    "double-escaped": lambda t: repr([json.dumps({"detail": t})]),
}


@pytest.mark.parametrize(("fid", "i", "sample"), SAMPLES, ids=[f"{f}-{i}" for f, i, _ in SAMPLES])
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_every_format_vanishes_in_every_context(fid: str, i: int, sample: Sample, context: str) -> None:
    planted = CONTEXTS[context](sample.text)
    out = redact_text(planted)
    assert not leaked(sample.secret_text, out), (fid, context, out)
    assert REDACTED in out or quote(REDACTED, safe="") in out


@pytest.mark.parametrize(("fid", "i", "sample"), LINE_SAMPLES, ids=[f"{f}-{i}" for f, i, _ in LINE_SAMPLES])
@pytest.mark.parametrize("prefix", ["", "[rank1]: ", "3: ", "    ", " 12 | [rank0]: "])
def test_whole_line_formats_vanish_on_their_line(fid: str, i: int, sample: Sample, prefix: str) -> None:
    text = f"Traceback (most recent call last):\n{prefix}{sample.text}\nValueError: bad key\n"
    out = redact_text(text)
    assert not leaked(sample.secret_text, out) and "ValueError: bad key" in out, out


@pytest.mark.parametrize(("fid", "i", "sample"), SAMPLES + LINE_SAMPLES,
                         ids=[f"{f}-{i}" for f, i, _ in SAMPLES + LINE_SAMPLES])
def test_sample_context_is_kept(fid: str, i: int, sample: Sample) -> None:
    out = redact_text(sample.text)
    if sample.kept:
        assert sample.kept in out, out


NEGATIVES = [(f.id, n) for f in FORMATS for n in f.negatives] + [
    ("git-sha", "HEAD is now at 0123456789abcdef0123456789abcdef01234567 fix loss scaling"),
    ("uuid", "run id 3f2504e0-4f89-11d3-9a0c-0305e82c3301 started"),
    ("loss", "{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': 0.1}"),
    ("sk-words", "risk-averse task-scheduler disk-based mask-rcnn"),
    ("tokens", "--max_new_tokens 512 --pad_token '<pad>' tokenizer_name_or_path=gpt2"),
    ("ds-config", "[INFO] [config.py:957:print]   zero_optimization ............ {'stage': 3}"),
    ("world-info", "--world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 --master_port=29500"),
    ("versions", "torch 2.3.1+cu121, cudnn 8.9.7.29, nccl 2.18.1"),
    ("sha256", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("placeholder", "hub_token=<HUB_TOKEN>, hub_private_repo=None, use_auth_token=True"),
    ("nccl", "NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7"),
    ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
]


@pytest.mark.parametrize(("fid", "negative"), NEGATIVES, ids=[f for f, _ in NEGATIVES])
def test_negatives_stay_untouched(fid: str, negative: str) -> None:
    assert redact_text(negative) == negative


@pytest.mark.parametrize(("planted", "words"), NAMED, ids=[p[:30] for p, _ in NAMED])
@pytest.mark.parametrize("context", ["plain", "cjk", "json", "traceback", "argv", "rank-prefix"])
def test_secret_named_values_keep_no_word(planted: str, words: list[str], context: str) -> None:
    out = redact_text(CONTEXTS[context](planted))
    for w in words:
        assert w not in out, (w, out)


def test_shell_assignment_keeps_the_command() -> None:
    out = redact_text("AWS_SECRET_ACCESS_KEY=abc/DEF+ghi python train.py --bf16")
    assert "abc/DEF" not in out and out.endswith("python train.py --bf16")


def test_format_ids_are_unique_and_every_format_has_a_sample() -> None:
    ids = [f.id for f in FORMATS]
    assert len(ids) == len(set(ids))
    assert all(f.samples for f in FORMATS)
    assert len(FORMATS) >= 61


def test_cut_redacts_before_cutting() -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
    line = "x" * 190 + token  # the token straddles character 200
    assert token[:8] in line[:200]  # a cut-then-redact would print half of it
    out = Redactor().cut(line, 200)
    assert not leaked(token, out)


# -- property: random formats, contexts and surroundings ------------------------------------
_filler = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SAMPLES), st.sampled_from(list(CONTEXTS)), _filler, _filler,
       st.sampled_from(["", " ", "\n", "_", "%3D", "\\n", "令", "'", '"', "=", ":", "/"]))
def test_no_planted_secret_survives(sample: tuple, context: str, before: str, after: str,
                                    glue: str) -> None:
    _, _, s = sample

    def ascii_alnum(ch: str) -> bool:
        return ch.isascii() and ch.isalnum()

    # A token glued to an ASCII letter or digit is a longer word, not that token: by design it
    # is left alone, so that ordinary words survive (docs/security.md, "what stays").
    assume(glue or not (ascii_alnum(before[-1:]) or ascii_alnum(after[:1])))
    text = before + glue + CONTEXTS[context](s.text) + glue + after
    out = redact_text(text)
    assert not leaked(s.secret_text, out), (context, out)


def test_docs_list_every_format() -> None:
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "security.md"
    text = doc.read_text(encoding="utf-8")
    missing = [f.id for f in FORMATS if f"| `{f.id}` |" not in text]
    assert not missing, f"add a row to docs/security.md for {missing}"


_ANY = st.lists(st.sampled_from(list("abcXYZ019_-=:/@%.'\"\\ \n\t{}[]()&?令")
                                + ["token", "password", "://", "-----BEGIN PRIVATE KEY-----",
                                   "%3D", "\\n", "hf_", "sk-", "--", "/home/", "10.0.0."]),
                max_size=80).map("".join)


@settings(max_examples=500, deadline=None)
@given(_ANY)
def test_redaction_never_fails_and_is_stable(text: str) -> None:
    # any text: no exception, and redacting the output again finds nothing new to hide
    red = Redactor(paths=True, hosts=True)
    once = red.text(text)
    assert isinstance(once, str)
    assert redact_text(redact_text(text)) == redact_text(text)


def test_cut_without_half_secret() -> None:
    from dsdoctor.redact.redactor import cut_without_half_secret

    token = "glpat-" + "Xy9_Wv8-Ut7sR6qP5oN4"
    plain = "word " * 30
    assert cut_without_half_secret(plain + "ordinaryidentifier", 155) == (plain + "ordinaryidentifier")[:155]
    out = cut_without_half_secret(plain + token + " end", 160)
    assert out == plain + "…" and len(out) <= 161
    named = "x" * 90 + " password: hunter2hunter2hunter2"
    assert "hunter2" not in cut_without_half_secret(named, 115)
