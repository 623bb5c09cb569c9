"""Values of secret-named keys, variables and flags, whatever the value looks like.

``password=...``, ``token: ...``, ``"api_key": "..."``, ``--hub_token x``, ``export HF_TOKEN=...``,
``'--hub_token', 'x'`` (the launcher's argv list) and ``token%3D...`` (URL-encoded) lose their
value. Quoted values go whole (every word of a multi-word value); unquoted values after ``: `` or
`` = `` run to the end of the line or the next structural delimiter; unquoted values after a bare
``=`` are one shell word (so ``HF_TOKEN=x python train.py`` keeps the command).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dsdoctor.redact.formats import REDACTED

# Name endings (separators removed, lower case) that make a value secret.
_SECRET_ENDINGS = (
    "token", "secret", "password", "passwd", "passphrase", "pwd", "apikey", "accesskey",
    "secretkey", "privatekey", "accountkey", "sharedaccesskey", "signingkey", "sessionkey",
    "masterkey", "encryptionkey", "clientkey", "credential", "credentials", "creds", "auth",
    "authorization", "cookie", "signature",
    # Datadog's application key ("app_key" in datadog.initialize() and datadog.yaml)
    "appkey", "applicationkey",
)
# "..._key_id" / "..._secret_id": the id of a credential is part of the credential.
_SECRET_ID_ENDINGS = ("accesskeyid", "privatekeyid", "secretid")
# Tokenizer special tokens and similar names that end in "token" but hold no secret.
_TOKENIZER_WORDS = frozenset({
    "pad", "eos", "bos", "unk", "sep", "cls", "mask", "image", "video", "audio", "start", "end",
    "special", "additional", "chat", "ignore", "decoder", "placeholder", "default", "vision", "boi",
    "eoi", "think", "fim", "prefix", "suffix", "middle", "im", "eot", "sop", "eop", "gmask",
    "begin", "stop", "split", "new", "eom", "system", "tool", "cont", "next", "first", "last",
    "max", "min", "num", "n", "per", "total", "context", "label", "input", "output", "word",
    "sentence", "sample", "pre", "post", "query", "doc", "bot_of",
})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def name_words(name: str) -> list[str]:
    """A key's words, lower case: ``HF_TOKEN`` and ``hfToken`` are ``["hf", "token"]``."""
    return [w.lower() for w in _SPLIT.split(_CAMEL.sub("_", name.strip())) if w]


def is_secret_name(name: str) -> bool:
    """True when a variable / key name says its value is a secret (``HF_TOKEN``, ``api-key``,
    ``AccountKey``, ``_authToken``, ``KAGGLE_KEY``); tokenizer special tokens
    (``pad_token``, ``max_new_tokens``) and counts are not."""
    words = name_words(name)
    if not words:
        return False
    compact = "".join(words)
    if compact.endswith(_SECRET_ID_ENDINGS):
        return True
    if words[0] in ("max", "min", "num", "n") or compact.endswith("tokens"):
        return False
    if words[-1] == "token" and len(words) >= 2 and words[-2] in _TOKENIZER_WORDS:
        return False
    if compact.endswith(_SECRET_ENDINGS):
        return True
    # Environment-variable style: KAGGLE_KEY, COMET_KEY (lower-case "text_key" is a dataset column)
    bare = name.strip().lstrip("-")
    return words[-1] == "key" and len(words) >= 2 and bare.isupper()


def is_secret_flag(flag: str) -> bool:
    """True for a command-line flag whose argument is a secret: a secret name, or any ``--*key``
    (``--wandb_key``, ``--api-key``)."""
    words = name_words(flag)
    if not words:
        return False
    return is_secret_name(flag) or (words[-1] == "key" and len(words) >= 1
                                    and not (len(words) >= 2 and words[-2] in ("sort", "dataset",
                                                                               "text", "column")))


# Values that hide nothing even under a secret name ("--hub_token None", "<HUB_TOKEN>").
_HARMLESS_VALUES = frozenset({"", "none", "null", "nil", "true", "false", "0", "1", "yes", "no",
                              "on", "off", "***", "xxx", "...", "<redacted>", "redacted", "''", '""'})


def harmless_value(value: str) -> bool:
    """True when a value under a secret name is a placeholder, not a secret."""
    v = value.strip().strip("\"'\\").strip()
    if v.lower() in _HARMLESS_VALUES:
        return True
    # placeholders: <HUB_TOKEN>, ${HF_TOKEN}, $HF_TOKEN, {{ secrets.X }}, %HF_TOKEN%
    return bool(re.fullmatch(r"<[A-Za-z0-9_ .-]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{[^}]*\}\}|"
                             r"%[A-Za-z_][A-Za-z0-9_]*%|\*+", v))


# A quoted value: "..." / '...' with escapes, optionally JSON-escaped (\"...\").
_QUOTED = (r'\\"(?:[^"\\\n]|\\[^"\n])*\\"'
           r'|"(?:[^"\\\n]|\\.)*"'
           r"|'(?:[^'\\\n]|\\.)*'")
# key <sep> value. The key may be quoted, JSON-escaped, dotted or dashed; the value is a quoted
# string or one word (a spaced separator extends it, see _value_end).
_ASSIGN = re.compile(
    r"(?P<key>(?<![A-Za-z0-9_.-])[A-Za-z_][A-Za-z0-9_.-]{0,100})"
    r"(?P<sep>\\?[\"']?(?:[ \t]*(?::|=|=>|:=)[ \t]*|%3[DdAa]))"
    r"(?P<val>" + _QUOTED + r"|(?P<bare>(?![{\[(])[^\s\"',;}\])&]+))"
)
# --flag value / --flag=value / '--flag', 'value' / "--flag" "value"
_FLAG = re.compile(
    r"(?P<key>(?<![A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9_.-]{0,100})"
    r"(?P<sep>=|[ \t]+|[\"'],[ \t]*(?=[\"'])|[\"'][ \t]+(?=[\"']))"
    r"(?P<val>" + _QUOTED + r"|(?P<bare>(?!-)[^\s\"']+))"
)
# Where an unquoted multi-word value ends: a delimiter, or the next "key=" / "--flag" item.
# Possessive runs and a look-behind that starts the blank run at its first character: the
# search is linear in the text (tests/test_redact_linear.py counts its steps).
_VALUE_END = re.compile(r"[\n\"',;}\])&]|(?<![ \t])[ \t]++"
                        r"(?=[A-Za-z_][A-Za-z0-9_.-]*+[ \t]*+[=:](?!//)|--?[A-Za-z])")
_KEYWORDS = ("token", "secret", "passw", "pwd", "passphrase", "key", "auth", "cred", "cookie",
             "sig")


def _quoted_redacted(val: str) -> str:
    if val.startswith('\\"'):
        return '\\"' + REDACTED + '\\"'
    return val[0] + REDACTED + val[0]


def _value_end(text: str, m: re.Match[str]) -> int:
    """End of an unquoted value: one word after a bare "=" (shell, query string, argv), every
    word to the end of the item after ": " / " = " ("password: correct horse battery staple")."""
    sep = m.group("sep")
    if not (sep.rstrip().endswith(":") or sep.endswith((" ", "\t"))):
        return m.end()
    stop = _VALUE_END.search(text, m.end())
    return stop.start() if stop else len(text)


def _scan(text: str, pattern: re.Pattern[str], secret: Callable[[str], bool]) -> str:
    """Replace the values of secret keys matched by ``pattern``. A non-secret match only skips
    its key and separator, so a secret inside its value ("detail": "password: x") is still
    found; each step moves forward, so the scan is linear in the matches."""
    out: list[str] = []
    pos = 0
    while True:
        m = pattern.search(text, pos)
        if m is None:
            break
        val = m.group("val")
        if not secret(m.group("key")) or harmless_value(val):
            out.append(text[pos:m.end("sep")])
            pos = m.end("sep")
            continue
        out.append(text[pos:m.start("val")])
        if m.group("bare") is None:
            out.append(_quoted_redacted(val))
            pos = m.end()
        else:
            out.append(REDACTED)
            pos = _value_end(text, m) if pattern is _ASSIGN else m.end()
    out.append(text[pos:])
    return "".join(out)


def redact_named(text: str) -> str:
    """``text`` with the values of secret-named flags and keys replaced by ``<redacted>``."""
    lowered = text.lower()
    if not any(k in lowered for k in _KEYWORDS):
        return text
    return _scan(_scan(text, _FLAG, is_secret_flag), _ASSIGN, is_secret_name)
