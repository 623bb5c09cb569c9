"""The one entry point of redaction: :class:`Redactor` applies, in order, the secret formats
(:mod:`.formats`), the values of secret-named keys and flags (:mod:`.names`) and, when asked, the
user/host placeholders (:mod:`.identity`).

Redact first, cut after: :meth:`Redactor.cut` redacts a whole text and only then shortens it, so a
token that straddles the cut is never printed in part.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

from dsdoctor.redact.entropy import redact_random_values
from dsdoctor.redact.formats import REDACTED, redact_formats
from dsdoctor.redact.names import harmless_value, is_secret_name, redact_named

# Longest text redacted in one piece; longer texts are redacted line by line (a secret format
# never spans lines except a PEM block, whose lines are each caught by pem-body-line).
_WHOLE_LIMIT = 4 * 1024 * 1024
# Keys and variables whose value is a host / a user name (learned, then hidden everywhere).
_HOST_KEYS = frozenset({"hostname", "host", "node", "nodename", "master_addr", "masteraddr",
                        "slurm_nodelist", "slurmd_nodename", "slurm_submit_host", "main_process_ip"})
_USER_KEYS = frozenset({"user", "username", "logname", "slurm_job_user", "sudo_user"})


# A run that may hold URL-encoded text ("next=https%3A%2F%2Fu%3Ap%40h", "sig=ab%2Bc%3D"): every
# maximal run, so that the search never restarts inside one (linear); _redact_encoded leaves a
# run without an escape as it is.
_ENCODED_RUN = re.compile(r"[^\s\"'<>]++")
# What quote() keeps as is when an encoded run is re-encoded after redaction.
_URL_SAFE = "/:?&=@;,+$-_.!~*'()<>[]#"


def _redact_plain(text: str) -> str:
    return redact_random_values(redact_named(redact_formats(text)))


def _redact_encoded(m: re.Match[str]) -> str:
    """A URL-encoded run, decoded, redacted and (only if something was found) re-encoded."""
    run = m.group(0)
    if "%" not in run:
        return run
    decoded = unquote(run)
    if decoded == run:
        return run
    red = _redact_plain(decoded)
    return run if red == decoded else quote(red, safe=_URL_SAFE)


def redact_secrets(text: str) -> str:
    """``text`` with every secret removed: the formats, then secret-named values, then the same
    on URL-encoded runs once decoded (``%3D``, ``%2B``, ``%0A`` do not hide a token)."""
    if not text:
        return text
    if len(text) > _WHOLE_LIMIT:
        parts = text.splitlines(keepends=True)
        if len(parts) > 1:  # one line of megabytes is redacted whole (no endless recursion)
            return "".join(redact_secrets(part) for part in parts)
    # A pass can expose a secret to the next (a decoded %3D run, a marker that now bounds a
    # token), so a text that changed is redacted again until it is stable: redacting dsdoctor's
    # own output never finds anything new. A text without secrets costs one pass.
    out = _redact_once(text)
    for _ in range(_MAX_PASSES):
        if out == text:
            break
        text, out = out, _redact_once(out)
    return out


_MAX_PASSES = 4


# A run that may be base64 (or base64url) of a text long enough to hold a token: a Docker
# "auth", a Kubernetes secret's data, a basic-auth header under any name. It starts only where a
# run starts (the look-behind) and is possessive, so the search is linear.
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{16,}+={0,2}")
# What base64 must decode to for it to be read as text: printable characters and line breaks.
_B64_TEXT = re.compile(r"[\t\n\r\x20-\x7e\u00a0-\uffff]*")


def _base64_text(run: str) -> str | None:
    """The text a base64 or base64url run decodes to, or None when it is not base64 of text."""
    body = run.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = (base64.urlsafe_b64decode(padded) if ("-" in body or "_" in body)
               else base64.b64decode(padded, validate=True))
        text = raw.decode("utf-8")
    except (ValueError, binascii.Error):
        return None
    return text if _B64_TEXT.fullmatch(text) else None


def _redact_base64(m: re.Match[str]) -> str:
    """A base64 run whose decoded text holds a secret goes whole (re-encoding a redacted text
    would say nothing more); any other run stays as it is."""
    run = m.group(0)
    text = _base64_text(run)
    if text is None or len(text) < 8:
        return run
    return run if redact_secrets(text) == text else REDACTED


# A hard wrap: the last word of a line and the first word of the next (after blanks and a rank
# prefix), joined, may be a token that neither half is. A wrapped token may span whole lines.
_WRAP_TAIL = re.compile(r"(?<![A-Za-z0-9_\-+/=.~])[A-Za-z0-9_\-+/=.~]++$")
_WRAP_HEAD = re.compile(r"[ \t]*+(?:\[rank\d++\]:[ \t]*+|\d++:[ \t]++)?([A-Za-z0-9_\-+/=.~]++)")
_WRAP_MAX_LINES = 40  # lines one wrapped word may span (a JWT wrapped at 20 columns: 15)
_WRAP_MAX_CHARS = 4096  # and characters: the work per line break stays bounded


def _join_wrapped(text: str) -> str:
    """``text`` with every token that a hard wrap split across lines redacted in each piece."""
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    i = 0
    while i < len(lines) - 1:
        tail = _WRAP_TAIL.search(lines[i].rstrip("\r"))
        if tail is None or REDACTED in tail.group(0):
            i += 1
            continue
        pieces = [(i, tail.start(), tail.end())]
        joined = tail.group(0)
        j = i + 1
        while j < len(lines) and j - i <= _WRAP_MAX_LINES and len(joined) <= _WRAP_MAX_CHARS:
            line = lines[j].rstrip("\r")
            head = _WRAP_HEAD.match(line)
            if head is None:
                break
            pieces.append((j, head.start(1), head.end(1)))
            joined += head.group(1)
            if head.end(1) != len(line):  # the word ends inside this line: the wrap ends here
                break
            j += 1
        # "# " first: a joined word is no line of its own, so the line formats (a PEM body
        # line) must not take it for one
        if len(pieces) > 1 and len(joined) >= 16 and redact_formats("# " + joined) != "# " + joined:
            for k, start, end in reversed(pieces):
                lines[k] = lines[k][:start] + REDACTED + lines[k][end:]
        i += 1
    return "\n".join(lines)


@functools.lru_cache(maxsize=1024)  # a log repeats its line ends and starts
# The scanner asks this of every line whose edge is a word (twice: as one line's next and as
# the next one's previous); a log repeating one line shape joins the same words on every line.
@functools.lru_cache(maxsize=1024)
def secret_word(word: str) -> bool:
    """Whether a word joined across a wrap is (or holds) a secret that a format recognises."""
    return len(word) >= 16 and redact_formats("# " + word) != "# " + word


def redact_wrapped_line(line: str, before: str, after: str) -> str:
    """``line``, one line of a log that is redacted on its own, with the piece of a token that a
    hard wrap split between it and its neighbours replaced by the marker. ``before`` is the text
    just before the line (its last lines, without the line break that ends them), ``after`` the
    text just after it. Only a joined word that a secret format recognises is touched, so
    ordinary wrapped text stays; a line whose edges join nothing costs two short matches."""
    suspect = False
    if after:
        tail = _WRAP_TAIL.search(line)
        first = after.split("\n", 1)[0].rstrip("\r")
        head = _WRAP_HEAD.match(first) if tail is not None else None
        if tail is not None and head is not None:
            # a next line that is one word may go on on the line after it: joined in full
            suspect = head.end(1) == len(first) or secret_word(tail.group(0) + head.group(1))
    if before and not suspect:
        last = before.rsplit("\n", 1)[-1].rstrip("\r")
        tail = _WRAP_TAIL.search(last)
        head = _WRAP_HEAD.match(line) if tail is not None else None
        if tail is not None and head is not None:
            suspect = tail.start() == 0 or secret_word(tail.group(0) + head.group(1))
    if not suspect:
        return line
    parts = ([before] if before else []) + [line] + ([after] if after else [])
    at = before.count("\n") + 1 if before else 0
    return _join_wrapped("\n".join(parts)).split("\n")[at]


def _redact_once(text: str) -> str:
    # Wraps first: a format may already match the first half of a wrapped token ("sk-proj-"
    # and 20 characters), which would hide the half that tells it was wrapped.
    out = _redact_plain(_join_wrapped(text) if "\n" in text else text)
    if "%" in out:
        out = _ENCODED_RUN.sub(_redact_encoded, out)
    out = _B64_RUN.sub(_redact_base64, out)
    # Two formats may cover the two halves of one value ("token://" then a PEM header): one
    # marker says the same.
    return _MARKER_RUN.sub(REDACTED, out) if REDACTED + REDACTED in out else out


_MARKER_RUN = re.compile(f"(?:{re.escape(REDACTED)}){{2,}}")


class _NoIdentity:
    """Stands in for IdentityMasker when neither paths nor hosts are hidden (it masks nothing
    then), so that analyze's redaction does not import it (19 regexes and the launch-script
    reader at import: about 5 ms of a 0.15 s start-up, issue 13)."""

    def learn(self, text: str) -> None:
        pass

    def add_host(self, host: str) -> None:
        pass

    def add_user(self, user: str) -> None:
        pass

    def mask(self, text: str) -> str:
        return text


_NO_IDENTITY = _NoIdentity()


class Redactor:
    """Applies the secret formats (always) and path/host hiding (when asked) to text.

    ``learn()`` on everything that will be redacted lets a host named in one place
    (``--master_addr node-3``) be hidden everywhere it appears.
    """

    def __init__(self, *, paths: bool = False, hosts: bool = False,
                 extra_hosts: Iterable[str] = (), this_machine: bool = False) -> None:
        self.paths = paths
        self.hosts = hosts
        self._identity: Any
        if not (paths or hosts):
            self._identity = _NO_IDENTITY
            return
        from dsdoctor.redact.identity import IdentityMasker  # noqa: PLC0415

        if this_machine:
            self._identity = IdentityMasker.for_this_machine(paths=paths, hosts=hosts)
            for h in extra_hosts:
                self._identity.add_host(h)
        else:
            self._identity = IdentityMasker(paths=paths, hosts=hosts, extra_hosts=extra_hosts)

    def learn(self, text: str) -> None:
        """Remember user and host names found in ``text`` (only when hiding them)."""
        self._identity.learn(text)

    def add_host(self, host: str) -> None:
        """Hide ``host`` everywhere from now on (only when hiding hosts): a node the analysis
        named (the per-rank table's hosts) that no line's context marks as a host."""
        if self.hosts:
            self._identity.add_host(host)

    def _learn_pair(self, key: str, value: str) -> None:
        k = key.lower()
        if k in _HOST_KEYS:
            if self.hosts:
                self._identity.add_host(value)
        elif k in _USER_KEYS and self.paths:
            self._identity.add_user(value)

    def text(self, text: str) -> str:
        """``text`` with every secret (and, if enabled, user path and host) hidden."""
        if not text:
            return text
        return self._identity.mask(redact_secrets(text))

    def cut(self, text: str, limit: int, marker: str = "") -> str:
        """Redact the whole ``text``, then cut it to ``limit`` characters (plus ``marker``)."""
        out = self.text(text)
        return out if len(out) <= limit else out[:limit] + marker

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Environment variables: secret names lose their whole value, the others are scanned."""
        out: dict[str, str] = {}
        for name, value in env.items():
            self._learn_pair(str(name), str(value))
        for name, value in env.items():
            if is_secret_name(name) and not harmless_value(str(value)):
                out[name] = REDACTED
            else:
                out[name] = self.text(str(value))
        return out

    def obj(self, value: Any, key: str = "") -> Any:
        """A JSON-like value (config dicts): secret keys lose their value, strings are scanned."""
        if isinstance(value, Mapping):
            return {self.text(str(k)) if isinstance(k, str) else k: self.obj(v, str(k))
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.obj(v, key) for v in value]
        if isinstance(value, str):
            if key and is_secret_name(key) and not harmless_value(value):
                return REDACTED
            if key:
                self._learn_pair(key, value)
            return self.text(value)
        if key and is_secret_name(key) and isinstance(value, int | float) and not isinstance(value, bool):
            return REDACTED  # a numeric PIN or password is a secret too
        return value


def redact_text(text: str, *, paths: bool = False, hosts: bool = False) -> str:
    """Redact one piece of text with a fresh :class:`Redactor`."""
    r = Redactor(paths=paths, hosts=hosts)
    r.learn(text)
    return r.text(text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Redact environment variables (secrets only)."""
    return Redactor().env(env)


def redact_report(report: Any, redactor: Redactor | None = None) -> Any:
    """A copy of a :class:`dsdoctor.model.Report` with secrets removed from every text it
    carries: evidence lines, symptom values, findings' messages and fixes, facts, inputs, notes.

    Renderers of ``analyze`` render ``redact_report(report)`` so that a token printed in the log
    (``--hub_token hf_...`` in the launcher's ``cmd =`` line) never reaches the output.
    """
    red = redactor or Redactor()

    def ev(e: Any) -> Any:
        return replace(e, text=red.text(e.text))

    symptoms = tuple(
        replace(s, evidence=tuple(ev(e) for e in s.evidence), first=ev(s.first), last=ev(s.last),
                values=red.obj(s.values))
        for s in report.symptoms)
    findings = tuple(
        replace(f, title=red.text(f.title), message=red.text(f.message), fix=red.text(f.fix),
                evidence=tuple(ev(e) for e in f.evidence),
                fix_change=red.obj(f.fix_change) if f.fix_change is not None else None)
        for f in report.findings)
    facts = tuple(replace(f, values=red.obj(f.values), evidence=ev(f.evidence)) for f in report.facts)
    return replace(report, symptoms=symptoms, findings=findings, facts=facts,
                   inputs=red.obj(report.inputs), notes=tuple(red.text(n) for n in report.notes))


# Characters a token is made of; a text cut inside one of them keeps a prefix of it.
_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.%~:@\\"
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_\-+/=.%~:@\\]*")
_KEY_CONTEXT = 120  # characters before the cut word that may name it ("password: ")
_WORD_LOOKAHEAD = 1000  # how far the cut word is followed to see whether it is a secret


def drop_cut_tail(text: str) -> str:
    """For a text that was cut upstream (a read cap), drop its last word: it may be the first
    half of a token, too short for any format to recognise. O(length of that word)."""
    kept = text.rstrip(_TOKEN_CHARS)
    return text if kept == text else kept + "…"


def cut_without_half_secret(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, without redacting it: when the cut falls inside a
    word that is (part of) a secret, the word is dropped instead of kept in half. Only the cut
    word and a little context before it are checked, so the work per call is bounded."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    kept = head.rstrip(_TOKEN_CHARS)
    if len(kept) == limit or text[limit] not in _TOKEN_CHARS:
        return head  # the cut falls between words
    run = _TOKEN_RUN.match(text, limit, limit + _WORD_LOOKAHEAD)
    end = run.end() if run is not None else limit
    window = text[max(0, len(kept) - _KEY_CONTEXT):end]
    return head if redact_secrets(window) == window else kept + "…"
