"""Which rules report: ``--select`` / ``--ignore``, ``[tool.dsdoctor]`` and inline suppressions.

As ruff does it: a selector is a rule code (``DS314``), a code prefix (``DS3``, ``DS``), a rule
name (``stage3-16bit-weights-not-saved``) or a category (``config``, ``symptom``, ...). A finding
reports when ``select`` is empty or one of its selectors matches, and no ``ignore`` selector
matches. Each setting comes from the first source that sets it: the command line, then the
nearest ``pyproject.toml`` with a ``[tool.dsdoctor]`` table (from the working directory up), then
the user's file (``$XDG_CONFIG_HOME/dsdoctor/config.toml``, by default
``~/.config/dsdoctor/config.toml``, keys at its top level). See docs/configuration.md.

An inline comment on the line of a config key, ``// dsdoctor: ignore[DS314]`` in a DeepSpeed
JSON (DeepSpeed reads it with hjson, which allows ``//`` and ``#`` comments) or
``# dsdoctor: ignore[DS314]`` in an Accelerate YAML, silences those rules' findings for that key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.model import Finding

KEYS = ("select", "ignore")
USER_FILE = Path("dsdoctor") / "config.toml"
#: ``// dsdoctor: ignore[DS314, DS308]`` or ``# dsdoctor: ignore[DS314]`` on a key's line.
_INLINE = re.compile(r"(?://|#)\s*dsdoctor:\s*ignore\[([^\]]*)\]", re.I)


@dataclass(frozen=True)
class RuleInfo:
    """What a selector is matched against: one rule's code, name and category."""

    code: str
    name: str
    category: str = ""


@dataclass(frozen=True)
class Selection:
    """The rules that report, and where each setting came from (for messages)."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    def reports(self, rule: RuleInfo) -> bool:
        if self.select and not any(matches(s, rule) for s in self.select):
            return False
        return not any(matches(s, rule) for s in self.ignore)

    @property
    def is_default(self) -> bool:
        return not self.select and not self.ignore


def matches(selector: str, rule: RuleInfo) -> bool:
    """A code, a code prefix (``DS3``; ``ALL``), a name or a category, case-insensitively."""
    s = selector.strip()
    if s.upper() == "ALL":
        return True
    if re.fullmatch(r"DS\d*", s, re.I):
        return rule.code.upper().startswith(s.upper())
    low = s.lower()
    return low == rule.name.lower() or (bool(rule.category) and low == rule.category.lower())


def split_selectors(values: Iterable[str]) -> tuple[str, ...]:
    """``["DS3,DS1", "config"]`` → ``("DS3", "DS1", "config")``: comma lists, repeats, order kept."""
    out: list[str] = []
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return tuple(out)


def check_selectors(selectors: Iterable[str], rules: Sequence[RuleInfo], where: str) -> None:
    """UsageError (one line, with the closest rule or category) for a selector that matches no
    rule: a typo would otherwise silence nothing, or everything, without a word."""
    import difflib  # noqa: PLC0415

    words = sorted({r.code for r in rules} | {r.name for r in rules}
                   | {r.category for r in rules if r.category})
    for s in selectors:
        if not any(matches(s, r) for r in rules):
            close = difflib.get_close_matches(s, words, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise UsageError(f"{where}: {s!r} names no rule, code prefix or category{hint} "
                             "('dsdoctor rules' lists them)")


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # noqa: PLC0415

    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc}); fix the file or remove it") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _table(data: dict[str, Any], path: Path, name: str) -> dict[str, tuple[str, ...]]:
    """The select/ignore lists of one config table; unknown keys and non-lists are errors."""
    out: dict[str, tuple[str, ...]] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise UsageError(f"{path}: unknown key {key!r} in {name} (known: {', '.join(KEYS)})")
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{path}: {name} {key} must be a list of rule codes, prefixes, "
                             f"names or categories, e.g. {key} = [\"DS314\"]")
        out[key] = split_selectors(value)
    return out


def project_file(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has a ``[tool.dsdoctor]`` table."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "dsdoctor" in _read_toml(candidate).get("tool", {}):
            return candidate
    return None


def user_file(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / USER_FILE


def resolve(cli_select: Sequence[str] = (), cli_ignore: Sequence[str] = (),
            cwd: Path | None = None, user: Path | None = None) -> Selection:
    """The selection of one command: each key from the command line, else the project's
    ``[tool.dsdoctor]``, else the user's file."""
    layers: list[tuple[str, dict[str, tuple[str, ...]]]] = []
    cli = {k: split_selectors(v) for k, v in (("select", cli_select), ("ignore", cli_ignore)) if v}
    layers.append(("the command line", cli))
    project = project_file((cwd or Path.cwd()).resolve())
    if project is not None:
        tool = _read_toml(project)["tool"]["dsdoctor"]
        if not isinstance(tool, dict):
            raise UsageError(f"{project}: [tool.dsdoctor] must be a table")
        layers.append((f"{project} [tool.dsdoctor]", _table(tool, project, "[tool.dsdoctor]")))
    upath = user if user is not None else user_file()
    if upath.is_file():
        layers.append((str(upath), _table(_read_toml(upath), upath, "the user config")))
    chosen: dict[str, tuple[str, ...]] = {}
    sources: list[str] = []
    for where, table in layers:
        for key in KEYS:
            if key in table and key not in chosen:
                chosen[key] = table[key]
                sources.append(f"{key} from {where}")
    return Selection(chosen.get("select", ()), chosen.get("ignore", ()), tuple(sources))


def inline_ignores(config_file: str, line: int) -> tuple[str, ...]:
    """The selectors of a ``dsdoctor: ignore[...]`` comment on line ``line`` of a config."""
    from dsdoctor.facts.configfile import config_bytes  # noqa: PLC0415 - read once per process

    try:
        raw = config_bytes(config_file)
    except (UsageError, OSError):
        return ()
    lines = raw.split(b"\n")
    if not 1 <= line <= len(lines):
        return ()
    m = _INLINE.search(lines[line - 1].decode("utf-8", "replace"))
    return split_selectors([m.group(1)]) if m else ()


def apply(findings: Iterable[Finding], selection: Selection | None,
          rules: Sequence[RuleInfo]) -> list[Finding]:
    """The findings that report: the selection, then each finding's inline suppression."""
    by_code = {r.code: r for r in rules}
    out = []
    for f in findings:
        info = by_code.get(f.rule, RuleInfo(f.rule, f.name))
        if selection is not None and not selection.reports(info):
            continue
        if f.config_file and f.config_line and any(
                matches(s, info) for s in inline_ignores(f.config_file, f.config_line)):
            continue
        out.append(f)
    return out


def apply_to_notes(notes: Iterable[str], selection: Selection | None,
                   rules: Sequence[RuleInfo]) -> list[str]:
    """A rule's own notes (``DS211: give --model ...``) go with its findings."""
    if selection is None or selection.is_default:
        return list(notes)
    by_code = {r.code: r for r in rules}
    out = []
    for note in notes:
        code = note.split(":", 1)[0]
        if code in by_code and not selection.reports(by_code[code]):
            continue
        out.append(note)
    return out


__all__ = ["RuleInfo", "Selection", "apply", "apply_to_notes", "check_selectors", "matches",
           "resolve"]
