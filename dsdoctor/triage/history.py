"""The triage history: every job's outcome appended to an embedded SQLite file (``--db``), and a
summary of a period (``--since 7d``)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dsdoctor import __version__
from dsdoctor.errors import UsageError
from dsdoctor.model import SCHEMA_VERSION
from dsdoctor.triage.outcome import Outcome

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    analyzed_at REAL NOT NULL,      -- seconds since the epoch (UTC)
    job TEXT NOT NULL,
    path TEXT NOT NULL,
    fate TEXT NOT NULL,             -- a verdict fate, or 'error' (the files could not be read)
    cause TEXT NOT NULL,
    rule TEXT NOT NULL,
    retriable TEXT NOT NULL,        -- yes | no | unknown
    fingerprint TEXT NOT NULL,      -- the deciding cause's id (docs/fingerprints.md)
    steps_lost INTEGER,
    sentence TEXT NOT NULL,
    dsdoctor_version TEXT NOT NULL,
    schema_version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_when ON jobs (analyzed_at);
CREATE INDEX IF NOT EXISTS jobs_fingerprint ON jobs (fingerprint);
"""
_SINCE = re.compile(r"^(\d+)([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_seconds(text: str) -> int:
    """``--since 7d``: minutes, hours, days or weeks (``30m``, ``12h``, ``7d``, ``2w``)."""
    m = _SINCE.match(text.strip())
    if not m:
        raise UsageError(f"--since {text!r}: give a number and a unit, m, h, d or w (e.g. 7d)")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def _connect(path: str) -> sqlite3.Connection:
    try:
        db = sqlite3.connect(path, timeout=30)
        db.executescript(_SCHEMA)
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"--db {path}: not a dsdoctor history or not writable ({exc}); give "
                         "another file") from None
    return db


def append(path: str, outcomes: Sequence[Outcome], now: float | None = None) -> int:
    """Append the outcomes (one transaction); returns how many rows were written."""
    when = time.time() if now is None else now
    db = _connect(path)
    try:
        with db:
            db.executemany(
                "INSERT INTO jobs (analyzed_at, job, path, fate, cause, rule, retriable, "
                "fingerprint, steps_lost, sentence, dsdoctor_version, schema_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(when, o.job, o.where, o.fate, o.cause, o.rule, o.retriable, o.fingerprint,
                  o.steps_lost, o.sentence, __version__, SCHEMA_VERSION) for o in outcomes])
    finally:
        db.close()
    return len(outcomes)


@dataclass(frozen=True)
class CauseCount:
    """One cause counted over jobs: how many, which retry answer, first and last seen."""

    cause: str
    rule: str
    fingerprint: str
    retriable: str
    jobs: int
    first_seen: float
    last_seen: float
    example: str  # one job's verdict sentence


@dataclass(frozen=True)
class Summary:
    since_s: int
    jobs: int
    fates: tuple[tuple[str, int], ...]
    causes: tuple[CauseCount, ...]


def summarize(path: str, since_s: int, now: float | None = None) -> Summary:
    """Jobs by fate and causes by fingerprint, over the last ``since_s`` seconds."""
    start = (time.time() if now is None else now) - since_s
    db = _connect(path)
    try:
        total = db.execute("SELECT COUNT(*) FROM jobs WHERE analyzed_at >= ?", (start,)).fetchone()[0]
        fates = db.execute("SELECT fate, COUNT(*) FROM jobs WHERE analyzed_at >= ? GROUP BY fate "
                           "ORDER BY COUNT(*) DESC, fate", (start,)).fetchall()
        rows = db.execute(
            "SELECT cause, rule, fingerprint, retriable, COUNT(*), MIN(analyzed_at), "
            "MAX(analyzed_at), MAX(sentence) FROM jobs WHERE analyzed_at >= ? AND fingerprint != '' "
            "GROUP BY cause, rule, fingerprint, retriable ORDER BY COUNT(*) DESC, cause",
            (start,)).fetchall()
    finally:
        db.close()
    return Summary(since_s=since_s, jobs=total, fates=tuple((f, n) for f, n in fates),
                   causes=tuple(CauseCount(*r) for r in rows))


__all__ = ["CauseCount", "Summary", "append", "since_seconds", "summarize"]
