"""Every shipped format pattern against its own real sample lines and negatives.

For each pattern of dsdoctor/logs/formats/*.yaml except facts.yaml (the rules engine's log facts,
tested by their owner; the engine checks below still load it):
- every sample line, normalized exactly as the scanner does it (reader.normalize: ANSI, quote
  markers, rank prefixes), matches through the loader's own matching function
  (``Pattern.match_lines``, with ``join_next`` lines for hard-wrapped samples), and yields the
  values the sample declares;
- the prefilter matches the raw bytes of the sample's first line (what both engines look at);
- no negative matches;
- the pure-Python engine finds a literal to search for (else it would regex-scan every chunk);
- the prefilter engines pick each sample line as a candidate when it sits inside a larger log.
Besides the per-pattern checks, every symptom kind has a producing pattern, and the timeline
is produced for all the fields the report shows.
"""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import pytest
import regex
from regex_steps import Counter, OverBudget

from dsdoctor.logs.formats import (
    FormatError,
    Pattern,
    check_precise,
    convert,
    load_patterns,
    with_unique_group_names,
)
from dsdoctor.logs.literal_engine import expanded_literals
from dsdoctor.logs.prefilter import available_engines, make_engine
from dsdoctor.logs.reader import normalize
from dsdoctor.model import SYMPTOM_KINDS

ALL_PATTERNS = load_patterns()
PATTERNS = tuple(p for p in ALL_PATTERNS if p.format != "facts")
SAMPLES = [(p, i, s) for p in PATTERNS for i, s in enumerate(p.samples)]
NEGATIVES = [(p, i, n) for p in PATTERNS for i, n in enumerate(p.negatives)]
ENGINES = available_engines()


def _split(sample_line: str) -> tuple[str, list[str]]:
    """A sample of a hard-wrapped message holds its physical lines separated by newlines."""
    lines = sample_line.split("\n")
    return lines[0], lines[1:]


def _match(pattern, line: str):
    first, rest = _split(line)
    following = [normalize(x.encode("utf-8")).text for x in rest]
    return pattern.match_lines(normalize(first.encode("utf-8")).text, following)


def _same(expected, got) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12)
    return str(expected) == str(got)


def test_formats_load_with_unique_ids():
    ids = [p.id for p in ALL_PATTERNS]
    assert len(ids) == len(set(ids))
    assert len(PATTERNS) >= 40


@pytest.mark.parametrize("kind", SYMPTOM_KINDS)
def test_every_symptom_kind_has_a_pattern(kind):
    assert any(p.emits == kind for p in PATTERNS), f"no format emits {kind!r}"


def test_timeline_fields_are_produced():
    produced = {f for p in PATTERNS if p.is_timeline for f in p.fields}
    for name in ("step", "loss", "grad_norm", "loss_scale", "skipped", "lr", "throughput", "epoch"):
        assert name in produced, f"no timeline pattern extracts {name!r}"


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_pattern_has_real_samples_and_negatives(pattern):
    assert pattern.samples, pattern.id
    for s in pattern.samples:
        assert s.get("source"), f"{pattern.id}: every sample names where it was copied from"
    if not pattern.is_fact:
        assert pattern.negatives, f"{pattern.id}: needs at least one real negative line"
    for name in pattern.fields:
        assert name in pattern.regex.groupindex, f"{pattern.id}: field {name!r} is not a group"


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_python_engine_has_a_literal(pattern):
    lits = expanded_literals(pattern.prefilter, pattern.caseless)
    assert lits, f"{pattern.id}: prefilter {pattern.prefilter!r} has no literal of 3+ chars"
    if not pattern.is_timeline:
        # Symptom prefilters run on every chunk of a multi-GB log: no bare common word, and a
        # literal long enough to be rare in healthy logs.
        for lit in lits:
            assert lit.lower() not in {b"loss", b"error", b"rank", b"step", b"nan", b"inf"}, (
                f"{pattern.id}: literal {lit!r} would hit nearly every line")
            assert len(lit) >= 5, f"{pattern.id}: literal {lit!r} is too short to be selective"


@pytest.mark.parametrize("pattern,i,sample", SAMPLES,
                         ids=[f"{p.id}-{i}" for p, i, _ in SAMPLES])
def test_sample_matches_with_values(pattern, i, sample):
    got = _match(pattern, sample["line"])
    assert got is not None, f"{pattern.id} sample {i} did not match: {sample['line'][:200]!r}"
    for key, want in (sample.get("values") or {}).items():
        assert key in got, f"{pattern.id} sample {i}: {key!r} not extracted (got {got})"
        assert _same(want, got[key]), f"{pattern.id} sample {i}: {key}={got[key]!r}, want {want!r}"


@pytest.mark.parametrize("pattern,i,sample", SAMPLES,
                         ids=[f"{p.id}-{i}" for p, i, _ in SAMPLES])
def test_prefilter_matches_raw_sample_bytes(pattern, i, sample):
    first, _ = _split(sample["line"])
    flags = re.IGNORECASE if pattern.caseless else 0
    assert re.search(pattern.prefilter.encode("utf-8"), first.encode("utf-8"), flags), (
        f"{pattern.id} sample {i}: prefilter {pattern.prefilter!r} misses the raw line")


@pytest.mark.parametrize("pattern,i,negative", NEGATIVES,
                         ids=[f"{p.id}-neg{i}" for p, i, _ in NEGATIVES])
def test_negative_does_not_match(pattern, i, negative):
    assert _match(pattern, negative) is None, (
        f"{pattern.id} matched its negative {i}: {negative[:200]!r}")


def _candidates(eng, data: bytes):
    # The engines take an optional scan limit (the scanner's look-ahead tail is not scanned).
    if len(inspect.signature(eng.candidates).parameters) >= 2:
        return eng.candidates(data, len(data))
    return eng.candidates(data)


def test_check_precise_refuses_what_re_reads_unlike_the_regex_module():
    # the patterns were written for the regex module; re reads [[:digit:]] as the set "[:digt"
    # then "]" (with a FutureWarning), and has no variable-width look-behind or recursion
    for source in (r"x[[:digit:]]+", r"(?<=a|bc)d", r"(?P<j>\{(?&j)*\})",
                   r"(?P<a>x)|(?P<a>y)(?P=a)"):
        with pytest.raises(FormatError):
            check_precise(source, False, "t")
    check_precise(r"Killed \(pid (?P<pid>\d+)\)", True, "t")


@pytest.mark.parametrize("pattern", ALL_PATTERNS, ids=lambda p: p.id)
def test_re_matches_as_the_regex_module_did(pattern):
    """The patterns were compiled with the regex module (VERSION0) until re replaced it at
    start-up: each sample, negative and all of them joined give the same span and values."""
    twin = regex.compile(pattern.source,
                         (regex.IGNORECASE if pattern.caseless else 0) | regex.VERSION0)
    texts = [normalize(x.encode("utf-8")).text
             for s in pattern.samples for x in s["line"].split("\n")]
    texts += [normalize(n.encode("utf-8")).text for n in pattern.negatives]
    texts.append(" ".join(texts))
    for text in texts:
        ours, theirs = pattern.regex.search(text), twin.search(text)
        assert (ours is None) == (theirs is None), (pattern.id, text)
        if ours is None:
            continue
        assert ours.span() == theirs.span(), (pattern.id, text)
        expected = {}
        for name, raw in theirs.groupdict().items():
            value = None if raw is None else convert(raw, pattern.fields.get(name, "str"))
            if value is not None:
                expected[name] = value
        got = pattern.match(text)
        assert got.keys() == expected.keys(), (pattern.id, text)
        assert all(_same(expected[k], got[k]) for k in expected), (pattern.id, text, got)


def test_repeated_group_names_take_the_last_group_that_took_part():
    source = r"(?:epoch=(?P<epoch>\d+)/step=(?P<step>\d+)|(?P<epoch>\d+)/(?P<step>\d+)),"
    check_precise(source, False, "t")
    p = Pattern(id="t", format="t", emits="timeline", prefilter="x", source=source,
                fields={"epoch": "int", "step": "int"})
    # ds-throughput's two shapes (DeepSpeed's engine; the first from 0.9 on)
    assert p.match("epoch=0/micro_step=9/global_step=9, RunningAvgSamplesPerSec=1") is None
    assert p.match("epoch=0/step=9, x") == {"epoch": 0, "step": 9}
    assert p.match("2/30, SamplesPerSec=1") == {"epoch": 2, "step": 30}
    assert with_unique_group_names(source).count("__dup2") == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_select_every_sample_line(engine):
    """Each sample, embedded among unrelated lines, is a candidate for its own pattern."""
    # All shipped patterns compiled together, as the scanner does (facts included).
    eng = make_engine(list(ALL_PATTERNS), engine)
    filler = b"[2023-01-15 19:09:56,630] [INFO] [utils.py:827:see_memory_usage] Engine before step\n"
    index = {p.id: k for k, p in enumerate(ALL_PATTERNS)}
    for p, i, s in SAMPLES:
        first, _ = _split(s["line"])
        raw = first.encode("utf-8")
        data = filler * 3 + raw + b"\n" + filler * 3
        start = len(filler) * 3
        hits = {idx for off, idx in _candidates(eng, data) if start <= off < start + len(raw) + 1}
        assert index[p.id] in hits, f"{engine}: {p.id} sample {i} not selected"


def _near_misses(pattern, size: int) -> list[str]:
    """Segments of about ``size`` characters built from the pattern's own samples, cut short and
    repeated or padded: the inputs on which a backtracking pattern does its worst."""
    texts = []
    for s in pattern.samples:
        line = s["line"].split("\n")[0]
        for cut in (1, 3, max(len(line) // 2, 1)):
            piece = line[:-cut] if cut < len(line) else line
            texts.append(((piece + " ") * (size // (len(piece) + 1) + 1))[:size])
            texts.append(piece + " " * size + "x")
            texts.append(piece.replace(" ", " " * (size // 160 + 1)))
    texts += ["Error: " + " " * size + "x", "|" * size, ("{'loss': 1.0, " * size)[:size],
              ": line 1:" + " " * size + "x Killed", "7" * size, "ab-cd.ef" * (size // 8)]
    return texts


#: Steps on 4x the text may grow at most this much: linear work grows 4x, quadratic 16x.
_GROWTH_LIMIT = 8


@pytest.mark.parametrize("pattern", ALL_PATTERNS, ids=lambda p: p.id)
def test_work_grows_linearly_on_near_misses(pattern):
    """No pattern may backtrack superlinearly on near-misses of its own samples (issue 24).

    Work is counted, not timed: tests/regex_steps.py replays the parsed pattern as a backtracking
    engine does and counts its steps, so a loaded machine cannot change the result. The work on
    1,024-character near-misses must stay within 8x the work on the same near-misses at 256
    (linear is 4x, quadratic 16x); the count stops as soon as it passes that.
    """
    counter = Counter(with_unique_group_names(pattern.source), pattern.caseless)
    for short, long in zip(_near_misses(pattern, 256), _near_misses(pattern, 1024), strict=True):
        _, steps_short = counter.search(short, budget=10**8)
        budget = _GROWTH_LIMIT * steps_short + 2_000
        try:
            _, steps_long = counter.search(long, budget=budget)
        except OverBudget:
            pytest.fail(f"{pattern.id}: more than {budget} steps on {long[:60]!r}... "
                        f"({len(long)} chars) against {steps_short} on its 256-char form: "
                        "superlinear backtracking")


@pytest.mark.parametrize("pattern", ALL_PATTERNS, ids=lambda p: p.id)
def test_step_counter_agrees_with_re(pattern):
    """The counter is only worth its counts if it matches what ``re`` matches."""
    counter = Counter(with_unique_group_names(pattern.source), pattern.caseless)
    lines = [s["line"] for s in pattern.samples] + list(pattern.negatives)
    for line in lines + [line[:-3] for line in lines]:
        assert counter.search(line, budget=10**8)[0] == (pattern.regex.search(line) is not None), line


def test_docs_list_every_format():
    docs = Path(__file__).resolve().parents[1] / "docs" / "formats.md"
    if not docs.exists():
        pytest.skip("docs/formats.md not present")
    text = docs.read_text(encoding="utf-8")
    for p in PATTERNS:
        assert p.id in text, f"docs/formats.md does not describe {p.id}"


# The two patterns rewritten for re, in their regex-module form (recursion, and a variable-width
# look-behind), against their re form on every sample and negative and on generated lines.
OLD_CONFIG_JSON = r'\]\s+json = (?P<json>\{(?>[^{}"]++|"(?:[^"\\]|\\.)*+"|(?&json))*+\})'
OLD_SCRIPT_LOSS = (r"""(?<![\w'"/])(?<!\biter \d+: )(?P<key>(?:[a-z]+[_ ])?(?<!lm )(?<!lm_)loss)"""
                   r"""(?: = | : | )(?P<value>-?(?:nan|inf))(?![\w.])""")


def _nested(rng, depth):
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([1, "a}b{", 'x"y', [1, 2], True, "\\"])
    return {f"k{i}": _nested(rng, depth - 1) for i in range(rng.randint(0, 3))}


def _depth(obj) -> int:
    return 1 + max((_depth(v) for v in obj.values()), default=0) if isinstance(obj, dict) else 0


def test_config_json_unrolled_to_8_levels_matches_the_recursive_form():
    import json
    import random

    pattern = next(p for p in ALL_PATTERNS if p.id == "fact-ds-config-json")
    old = regex.compile(OLD_CONFIG_JSON, regex.VERSION0)
    rng = random.Random(7)
    checked = 0
    for _ in range(3000):
        obj = {"a": _nested(rng, rng.randint(0, 9))}
        if _depth(obj) > 8:
            continue
        text = ("[x] json = " + json.dumps(obj, indent=rng.choice([None, 4])).replace("\n", " ")
                + rng.choice(["", " }", "}}", " tail"]))
        for cut in (len(text), len(text) // 2, len(text) - 1):
            a, b = old.search(text[:cut]), pattern.regex.search(text[:cut])
            assert (a and a.group("json")) == (b and b.group("json")), text[:cut]
            checked += 1
    assert checked > 5000


def test_script_loss_fixed_width_look_behinds_match_the_variable_one():
    pattern = next(p for p in ALL_PATTERNS if p.id == "script-loss-nonfinite")
    old = regex.compile(OLD_SCRIPT_LOSS, regex.IGNORECASE | regex.VERSION0)
    texts = [s["line"] for s in pattern.samples] + list(pattern.negatives)
    texts += [f"{w} {'9' * n}: {k} {v}" for w in ("iter", "Iter", "step", "xiter")
              for n in (1, 5, 12) for k in ("loss", "train_loss", "loss =") for v in ("nan", "-inf")]
    for text in texts:
        a, b = old.search(text), pattern.regex.search(text)
        assert (a and a.span()) == (b and b.span()), text


TIMELINE = tuple(p for p in PATTERNS if p.is_timeline)


@pytest.mark.parametrize("line", sorted({s["line"] for p in TIMELINE for s in p.samples}
                                        | {n for p in TIMELINE for n in p.negatives
                                           if p.format == "generic-progress"}))
def test_one_line_is_at_most_one_timeline_point(line):
    """Every timeline pattern adds a point for each line it matches: the generic progress
    patterns (generic-progress.yaml) must stay off the lines the specific ones read, and off each
    other's, or a step would be counted twice (and the live loss plotted twice)."""
    hits = [p.id for p in TIMELINE if _match(p, line) is not None]
    assert len(hits) <= 1, f"{hits} all match {line!r}"
