"""Every redaction pattern does linear work on near-misses (issue 24, item 4).

Work is counted, not timed: tests/regex_steps.py replays the parsed pattern as a backtracking
engine does and counts its steps. On near-misses built from each format's own samples and
keywords (cut short, repeated, padded with spaces, wrapped), the steps on 4x the text stay within
8x the steps on the short form (linear is 4x, quadratic 16x); the count stops past that budget.
"""

from __future__ import annotations

import re

import pytest
from regex_steps import Counter, OverBudget

from dsdoctor.redact import entropy, identity, names, redactor
from dsdoctor.redact.formats import secret_formats

_GROWTH_LIMIT = 8
_SHORT, _LONG = 128, 512


def _patterns() -> list[tuple[str, str, list[str]]]:
    """(id, source, seed texts) of every regex the redactor runs."""
    out = []
    for f in secret_formats():
        seeds = [s.text for s in f.samples] + list(f.negatives) + list(f.keywords)
        out.append((f.id, f.source, seeds))
    named_seeds = ["password: x", '"api_key": "v', "--hub_token x", "token%3D", "key = a b c",
                   "password: 'a b", 'password: "a b', "a=b "]
    for name in ("_ASSIGN", "_FLAG", "_VALUE_END"):
        out.append((f"names.{name}", getattr(names, name).pattern, named_seeds))
    pair_seeds = ['"x": "iK2ZWeqhFWCEPyYngFb51yBMW"', "x=iK2ZWeqhFWCEPyYngFb51yBMW", "a: b",
                  "GPU-8e3c1b2a-1d2e", "global_step1000_Model2"]
    for name in ("_RUN", "_KEY_BEFORE", "_HEX", "_PREFIXED_HEX", "_MANGLED", "_LOWER_RUN",
                 "_WORD_PART", "_CAPITALIZED"):
        out.append((f"entropy.{name}", getattr(entropy, name).pattern, pair_seeds))
    for name in ("_ENCODED_RUN", "_MARKER_RUN", "_TOKEN_RUN"):
        out.append((f"redactor.{name}", getattr(redactor, name).pattern, ["a%3Db", "<redacted>"]))
    for name in ("_B64_RUN", "_WRAP_TAIL", "_WRAP_HEAD"):
        if hasattr(redactor, name):
            out.append((f"redactor.{name}", getattr(redactor, name).pattern, ["aGVsbG8=", "x\ny"]))
    ident = ["/home/alice/x", "alice@example.com", "10.0.0.1:29500", "--master_addr node-1",
             "node-12: x", "fe80::1:2:3", "--world_info=eyJ"]
    for name in ("_HOME_PATH", "_WIN_HOME_PATH", "_EMAIL", "_IPV4", "_IPV6", "_IPV4_IN_ADDRESS",
                 "_WORLD_INFO"):
        out.append((f"identity.{name}", getattr(identity, name).pattern, ident))
    for i, pat in enumerate(identity._HOST_CONTEXTS):
        out.append((f"identity.host{i}", pat.pattern, ident))
    return out


PATTERNS = _patterns()


def near_misses(seeds: list[str], size: int) -> list[str]:
    """Texts of about ``size`` characters on which a backtracking pattern does its worst: each
    seed cut short and repeated, padded with spaces, its spaces widened, wrapped on lines."""
    texts = []
    for seed in seeds:
        for piece in dict.fromkeys((seed[:-1], seed[: max(len(seed) // 2, 1)])):
            if not piece:
                continue
            reps = size // (len(piece) + 1) + 1
            texts.append(((piece + " ") * reps)[:size])
            texts.append(((piece + "\n") * reps)[:size])
            texts.append((piece * reps)[:size])
            texts.append(piece + " " * size + "x")
            texts.append(piece + "\t" * size)
            texts.append(piece.replace(" ", " " * (size // 160 + 1)))
            texts.append(piece + "A" * size)
            texts.append(piece + "\\" * size)
    texts += [" " * size + "x", "\\" * size + "n", '"' * size, "a" * size, "7" * size,
              "ab-cd.ef" * (size // 8), "aB3+" * (size // 4), ("a b " * size)[:size],
              ("x=" * size)[:size], ("%3D" * size)[:size], ("-" * size)]
    return texts


def _seed_texts(source: str, seeds: list[str]) -> list[tuple[str, str]]:
    return list(zip(near_misses(seeds, _SHORT), near_misses(seeds, _LONG), strict=True))


@pytest.mark.parametrize(("pid", "source", "seeds"), PATTERNS, ids=[p[0] for p in PATTERNS])
def test_work_grows_linearly_on_near_misses(pid: str, source: str, seeds: list[str]) -> None:
    counter = Counter(source)
    for short, long in _seed_texts(source, seeds):
        _, steps_short = counter.search(short, budget=10**8)
        budget = _GROWTH_LIMIT * steps_short + 2_000
        try:
            counter.search(long, budget=budget)
        except OverBudget:
            pytest.fail(f"{pid}: more than {budget} steps on {long[:60]!r}... ({len(long)} "
                        f"chars) against {steps_short} on its {_SHORT}-char form: superlinear")


@pytest.mark.parametrize(("pid", "source", "seeds"), PATTERNS, ids=[p[0] for p in PATTERNS])
def test_step_counter_agrees_with_re(pid: str, source: str, seeds: list[str]) -> None:
    compiled = re.compile(source)
    counter = Counter(source)
    for text in seeds + [s[:-3] for s in seeds]:
        assert counter.search(text, budget=10**8)[0] == (compiled.search(text) is not None), text
