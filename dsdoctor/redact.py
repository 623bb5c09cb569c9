"""Remove secrets (and optionally user paths and host names) from text before it leaves the machine.

Everything dsdoctor puts into a report or an issue body goes through :class:`Redactor`: log
excerpts, launch commands, configs and environment variables. Secret patterns are always applied;
``paths`` and ``hosts`` are opt-in because they also hide information that helps maintainers.

Hosts are replaced by stable placeholders (``<host1>``, ``<ip2>``) rather than one token, so a
reader can still tell that two lines talk about the same node.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

# Names whose value is a secret whatever it looks like (env vars, config keys, CLI flags).
# Matched against the whole name, case-insensitively, after normalising "-" to "_".
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:token|secret|password|passwd|pwd|credentials?|api_?key|access_?key|secret_?key|"
    r"private_?key|auth|authorization|session_?key|signing_?key)(?:_id)?$"
    r"|(?:^|_)(?:token|secret|password|api_?key)_",
    re.IGNORECASE,
)
# Names that end like a secret but hold harmless values (special tokens of a tokenizer, counts).
_NOT_SECRET_NAMES = frozenset(
    {
        "pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token", "mask_token",
        "pad_token_id", "eos_token_id", "bos_token_id", "unk_token_id", "sep_token_id",
        "cls_token_id", "mask_token_id", "decoder_start_token_id", "use_auth_token",
        "chat_template_token", "ignore_token", "image_token", "tokens", "max_tokens",
    }
)
# Values that carry no secret even under a secret-looking name ("--hub_token None").
_HARMLESS_VALUES = frozenset({"", "none", "null", "true", "false", "0", "1", REDACTED.lower()})

# (pattern, replacement) applied in order. Each pattern keeps its context (the key name) and
# replaces only the secret so the reader still sees *that* a token was there.
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization headers, before the generic token rules eat half of them.
    (re.compile(r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)[^\s\"',}]+"),
     r"\1" + REDACTED),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + REDACTED),
    # Passwords in URLs: scheme://user:password@host -> scheme://user:<redacted>@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@\"'<>]+):[^\s@/\"'<>]+@"), r"\1:" + REDACTED + "@"),
    # Hugging Face user/org tokens (hf_ + 34 chars; old org tokens api_org_...).
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), REDACTED),
    (re.compile(r"\bapi_org_[A-Za-z0-9]{20,}\b"), REDACTED),
    # GitHub tokens: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained (github_pat_).
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"), REDACTED),
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
    (re.compile(r"(?<![A-Za-z0-9_-])sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}"), REDACTED),
    # AWS access key ids and secret keys.
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"(?i)(\baws_secret_access_key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{16,}"),
     r"\1" + REDACTED),
    # Weights & Biases: 40 hex (optionally "local-" prefixed) after the variable or `wandb login`.
    (re.compile(r"(?i)(\bwandb_api_key[\"']?\s*[:=]\s*[\"']?)(?:[a-z0-9-]+-)?[0-9a-f]{40}\b"),
     r"\1" + REDACTED),
    (re.compile(r"(?i)(\bwandb\s+login\s+(?:--\S+\s+)*)(?:[a-z0-9-]+-)?[0-9a-f]{40}\b"),
     r"\1" + REDACTED),
    # Slack / Stripe-like and JWTs show up in pasted env dumps too.
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), REDACTED),
)

# "--hub_token X", "--hub-token=X", "--wandb_api_key X": flag ends with a secret word.
_SECRET_FLAG = re.compile(
    r"(?i)(?<![\w-])(?P<flag>--?[A-Za-z0-9_.-]*?(?:token|key|secret|password|passwd|pwd|credentials?))"
    r"(?![A-Za-z0-9_-])(?P<sep>\s*=\s*|\s+|[\"'],\s*[\"']|[\"']\s+[\"'])(?P<q>[\"']?)(?P<val>[^\s\"']+)"
)
# key = value / "key": "value" / KEY=value where key is a secret-looking name.
_SECRET_ASSIGN = re.compile(
    r"(?i)(?P<key>\b[A-Za-z0-9_.-]*?(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|"
    r"secret[_-]?key|private[_-]?key|credentials?))(?P<sep>[\"']?\s*(?:=|:)\s*[\"']?)"
    r"(?P<val>[^\s\"',}\])]+)"
)

_HOME_PATH = re.compile(r"(?P<pre>/home/|/Users/|/mnt/home/|/u/)(?P<user>[^/\s\"':]+)")
_WIN_HOME_PATH = re.compile(r"(?i)(?P<pre>[A-Z]:\\Users\\)(?P<user>[^\\\s\"':]+)")
_IPV4 = re.compile(r"(?<![\d.])((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})(?![\d.])")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}:){3,7}[0-9A-Fa-f]{1,4}(?![0-9A-Fa-f:])")
# Addresses that identify nothing: loopback, any, link-local.
_IP_KEEP = frozenset({"127.0.0.1", "0.0.0.0", "255.255.255.255"})
# Contexts that name a host: MASTER_ADDR, --master_addr, hostfile lines, launcher rank prefixes.
_HOST_CONTEXTS = (
    re.compile(r"(?i)\bmaster[_-]?addr(?:ess)?[\"']?\s*[=:]?\s*[\"']?(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)"),
    re.compile(r"(?i)--(?:master_addr|rdzv[_-]endpoint|main_process_ip|hostname|node[_-]?ip)[= ]"
               r"[\"']?(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)"),
    re.compile(r"(?m)^\s*(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)\s+slots\s*=\s*\d+"),
    re.compile(r"(?i)\bhostname\s*[=:]\s*[\"']?(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)"),
    # pdsh/deepspeed multi-node prefix "node-12: [2024-...]" and "worker-1: Traceback"
    re.compile(r"(?m)^(?P<host>[A-Za-z][A-Za-z0-9_.-]*[-_.][A-Za-z0-9_.-]*\d[A-Za-z0-9_.-]*): "),
    # WORLD INFO DICT: {'worker-0': [0, 1], 'worker-1': [0, 1]}
    re.compile(r"[{,]\s*'(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)':\s*\["),
    # AWS-style and FQDN hosts
    re.compile(r"\b(?P<host>ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.[A-Za-z0-9.-]+)?)\b"),
    re.compile(r"\b(?P<host>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.(?:internal|local|lan|cluster|corp|intra))\b"),
)
# Words that look like hosts in those contexts but are not ("localhost" hides nothing).
_HOST_KEEP = frozenset({"localhost", "none", "null", "auto", "true", "false", "env", "tcp", "file"})


def is_secret_name(name: str) -> bool:
    """True when a variable/key name says its value is a secret (``HF_TOKEN``, ``api-key``)."""
    norm = _norm_name(name)
    if norm in _NOT_SECRET_NAMES or norm.endswith("_tokens"):
        return False
    if norm.startswith(("max_", "min_", "num_")):
        return False
    return bool(_SECRET_NAME.search(norm))


def is_secret_flag(flag: str) -> bool:
    """True for a command-line flag whose argument is a secret: any ``--*token``, ``--*key``,
    ``--*secret`` or ``--*password`` (``--hub_token``, ``--wandb-key``), tokenizer special tokens
    excepted."""
    norm = _norm_name(flag)
    if norm in _NOT_SECRET_NAMES:
        return False
    return norm.endswith(("token", "key", "secret", "password", "passwd", "pwd", "credential",
                          "credentials")) or is_secret_name(norm)


def _norm_name(name: str) -> str:
    return name.strip().lstrip("-").replace("-", "_").replace(".", "_").lower()


def _secret_value(val: str) -> bool:
    return val.strip("\"'").lower() not in _HARMLESS_VALUES and not val.startswith("<")


class Redactor:
    """Applies the secret patterns (always) and path/host hiding (opt-in) to text.

    ``learn()`` first on everything that will be redacted lets host names found in one place
    (``--master_addr node-3``) be hidden everywhere they appear.
    """

    def __init__(self, *, paths: bool = False, hosts: bool = False,
                 extra_hosts: Iterable[str] = ()) -> None:
        self.paths = paths
        self.hosts = hosts
        self._host_map: dict[str, str] = {}
        self._ip_map: dict[str, str] = {}
        self._home = os.path.expanduser("~") if paths else ""
        for h in extra_hosts:
            self._add_host(h)

    # -- hosts -------------------------------------------------------------------------------
    def _add_host(self, host: str) -> None:
        host = host.strip().strip(".")
        if not host or host.lower() in _HOST_KEEP or _IPV4.fullmatch(host) or host.isdigit():
            return
        if len(host) < 3:
            return
        self._host_map.setdefault(host, f"<host{len(self._host_map) + 1}>")

    def learn(self, text: str) -> None:
        """Remember host names named by context in ``text`` (only when hiding hosts)."""
        if not self.hosts:
            return
        for pat in _HOST_CONTEXTS:
            for m in pat.finditer(text):
                self._add_host(m.group("host"))

    def _ip(self, m: re.Match[str]) -> str:
        ip = m.group(0)
        if ip in _IP_KEEP or ip.startswith("127."):
            return ip
        return self._ip_map.setdefault(ip, f"<ip{len(self._ip_map) + 1}>")

    # -- main entry points ---------------------------------------------------------------------
    def text(self, text: str) -> str:
        """Return ``text`` with every secret (and, if enabled, user path and host) hidden."""
        if not text:
            return text
        out = text
        for pat, repl in _SECRET_PATTERNS:
            out = pat.sub(repl, out)
        out = _SECRET_FLAG.sub(self._flag_repl, out)
        out = _SECRET_ASSIGN.sub(self._assign_repl, out)
        if self.paths:
            if self._home and self._home not in ("/", "/root") and len(self._home) > 3:
                out = out.replace(self._home, "~")
            out = _HOME_PATH.sub(lambda m: m.group("pre") + "<user>", out)
            out = _WIN_HOME_PATH.sub(lambda m: m.group("pre") + "<user>", out)
        if self.hosts:
            self.learn(out)
            out = _IPV4.sub(self._ip, out)
            out = _IPV6.sub(self._ip, out)
            # Longest names first so "node-1.cluster" is replaced before "node-1".
            for host in sorted(self._host_map, key=len, reverse=True):
                out = re.sub(rf"(?<![A-Za-z0-9_.-]){re.escape(host)}(?![A-Za-z0-9_-])",
                             self._host_map[host], out)
        return out

    @staticmethod
    def _flag_repl(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group("flag")) or not _secret_value(m.group("val")):
            return m.group(0)
        return f"{m.group('flag')}{m.group('sep')}{m.group('q')}{REDACTED}"

    @staticmethod
    def _assign_repl(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("key")) or not _secret_value(m.group("val")):
            return m.group(0)
        return f"{m.group('key')}{m.group('sep')}{REDACTED}"

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Redact a mapping of environment variables: secret names lose their whole value."""
        out: dict[str, str] = {}
        for name, value in env.items():
            if is_secret_name(name) and _secret_value(str(value)):
                out[name] = REDACTED
            else:
                out[name] = self.text(str(value))
        return out

    def obj(self, value: Any, key: str = "") -> Any:
        """Redact a JSON-like value (config dicts): secret keys lose their value, strings are scanned."""
        if isinstance(value, Mapping):
            return {k: self.obj(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.obj(v, key) for v in value]
        if isinstance(value, str):
            if key and is_secret_name(key) and _secret_value(value):
                return REDACTED
            return self.text(value)
        return value


def redact_text(text: str, *, paths: bool = False, hosts: bool = False) -> str:
    """Convenience: redact one piece of text with a fresh :class:`Redactor`."""
    r = Redactor(paths=paths, hosts=hosts)
    r.learn(text)
    return r.text(text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Convenience: redact environment variables (secrets only)."""
    return Redactor().env(env)


def redact_report(report: Any, redactor: Redactor | None = None) -> Any:
    """A copy of a :class:`dsdoctor.model.Report` with secrets removed from every text it
    carries: evidence lines, symptom values, findings' messages and fixes, facts, inputs, notes.

    Renderers of ``analyze`` should render ``redact_report(report)`` so that a token printed in
    the log (``--hub_token hf_...`` in the launcher's ``cmd =`` line) never reaches the output.
    """
    from dataclasses import replace

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
