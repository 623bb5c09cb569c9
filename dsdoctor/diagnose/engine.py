"""The rules engine: rules are YAML data in ``rules/`` (shipped as ``dsdoctor.rules``).

A rule file (``rules/<CODE>-<name>.yaml``) holds a stable code, a problem-naming name, severity,
title, summary, explanation, fix, references, a declarative ``when:`` condition, an optional
``hook: <key>`` naming a check of ``dsdoctor.diagnose.checks.registry.CHECKS`` for
arithmetic/AST rules, and examples that must fire and must stay silent (run by
``tests/test_rules_examples.py``). Nothing in a rule file is evaluated as code.

Conditions (``when:``), combined freely::

    symptom: gpu-oom                      # the log shows this symptom kind
    fact: launch-cmd                      # the log states this fact
    config: {path: fp16.enabled, equals: true}     # effective DeepSpeed config
    accelerate: {path: distributed_type, in: [FSDP]}
    env: {path: cpu.ram_total_bytes, exists: true}
    args: {path: fp16, truthy: true}      # Trainer arguments
    model: {path: torch_dtype, equals: bfloat16}
    all: [...]   any: [...]   not: {...}

Value tests: ``equals``, ``in``, ``exists`` (bool), ``truthy`` (bool), ``gt``/``ge``/``lt``/``le``
(numbers; a non-number never matches).

A hook is called as ``hook(ctx, rule) -> Iterable[Finding | dict]`` only when ``when`` holds (or
there is no ``when``); the engine fills rule, name, severity, title, fix and references the hook
left empty. A rule without a hook yields one finding from its own texts when ``when`` holds.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dsdoctor.facts import dskeys
from dsdoctor.facts.configfile import lookup
from dsdoctor.facts.context import Context
from dsdoctor.model import SEVERITIES, SYMPTOM_KINDS, Finding

_CODE = re.compile(r"^DS\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_HOOK = re.compile(r"^[a-z_][a-z0-9_]*$")
_SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}
_SOURCES = ("config", "accelerate", "env", "args", "model")
_TESTS = ("equals", "in", "exists", "truthy", "gt", "ge", "lt", "le")
#: ``launch`` is a shell launch script (run.sh, given with --script); ``script`` a Python one.
_EXAMPLE_KEYS = {"log", "config", "accelerate", "model", "env", "envs", "script", "launch", "args",
                 "ds_version", "expect", "note", "world_size"}
_MISSING = object()

HookFn = Callable[[Context, "Rule"], Iterable[Any]]

#: A traced claim's source: upstream code at a release tag, a thread (a maintainer's statement),
#: or a test of this repository that shows the behaviour for real.
_CODE_SOURCE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<tag>[\w.+-]+):(?P<path>[^:\s]+)"
                          r":(?P<first>\d+)(?:-(?P<last>\d+))?$")
_TEST_SOURCE = re.compile(r"^(?P<path>tests/[\w/]+\.py)::(?P<name>\w+)$")
_THREAD_SOURCE = re.compile(r"^https://\S+$")
#: ``holds``: the releases a claim holds for, e.g. ``deepspeed >=0.10.1`` or
#: ``transformers >=4.40,<5``; a package name, then comma-separated version bounds.
_HOLDS = re.compile(r"^(?P<package>[a-z][a-z0-9_.-]*)(?: (?P<spec>(?:[<>=!]=?|~=)[\w.]+"
                    r"(?:,(?:[<>=!]=?|~=)[\w.]+)*))?$")


class RuleError(ValueError):
    """A rule file breaks an invariant (a bug in dsdoctor's rules, found at load time)."""


@dataclass(frozen=True)
class Verified:
    """One factual claim of a rule, traced to where it can be checked.

    ``source`` is one of: ``owner/repo@TAG:path:LINE[-LINE]`` (upstream code at a release tag;
    ``quote`` must then be a substring of those lines, so the citation can be re-checked against
    the tag), a thread URL (a maintainer's statement), or ``tests/<file>.py::<test>`` (a test of
    this repository that shows the behaviour for real). ``holds`` names the releases it holds for.
    """

    claim: str
    source: str
    holds: str
    quote: str = ""

    @property
    def kind(self) -> str:
        if _CODE_SOURCE.match(self.source):
            return "code"
        return "test" if _TEST_SOURCE.match(self.source) else "thread"


@dataclass(frozen=True)
class Rule:
    """One rule, as written in its YAML file."""

    code: str
    name: str
    severity: str
    title: str
    summary: str
    explanation: str
    fix: str
    references: tuple[str, ...]
    when: dict[str, Any] | None
    hook: str | None
    examples: dict[str, tuple[dict[str, Any], ...]]
    applies: str = ""  # which releases/tools the rule applies to, in words
    category: str = ""
    file: str = ""
    verified: tuple[Verified, ...] = ()
    # whether a retry can help when this rule explains a failure (diagnose/retry.py):
    # {value, reason, needs_checkpoint, cases: [{text, value, reason}]}; None: the category's
    retriable: dict[str, Any] | None = None

    @property
    def symptoms(self) -> tuple[str, ...]:
        """Symptom kinds the ``when`` condition refers to."""
        return tuple(_walk_symptoms(self.when))

    def hook_fn(self) -> HookFn | None:
        """The registered check of this rule (the loader made sure it exists)."""
        return _checks()[self.hook] if self.hook else None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["references"] = list(self.references)
        d["examples"] = {k: list(v) for k, v in self.examples.items()}
        d["verified"] = [dataclasses.asdict(v) for v in self.verified]
        return d


def _walk_symptoms(cond: Any) -> Iterable[str]:
    if isinstance(cond, dict):
        for key, val in cond.items():
            if key == "symptom":
                yield from ([val] if isinstance(val, str) else list(val or []))
            elif key in ("all", "any"):
                for c in val or []:
                    yield from _walk_symptoms(c)
            elif key == "not":
                yield from _walk_symptoms(val)


def _checks() -> dict[str, HookFn]:
    """The check registry (imported late: the checks import the context, not the engine)."""
    from dsdoctor.diagnose.checks.registry import CHECKS

    return CHECKS


# --------------------------------------------------------------------------------- validation

def _check_condition(cond: Any, where: str) -> None:
    if not isinstance(cond, dict) or len(cond) != 1:
        raise RuleError(f"{where}: a condition is a mapping with exactly one key, got {cond!r}")
    (key, val), = cond.items()
    if key in ("all", "any"):
        if not isinstance(val, list) or not val:
            raise RuleError(f"{where}: '{key}' takes a non-empty list of conditions")
        for c in val:
            _check_condition(c, where)
    elif key == "not":
        _check_condition(val, where)
    elif key == "symptom":
        kinds = [val] if isinstance(val, str) else val
        for k in kinds or []:
            if k not in SYMPTOM_KINDS:
                raise RuleError(f"{where}: unknown symptom kind {k!r} (see dsdoctor.model.SYMPTOM_KINDS)")
    elif key == "fact":
        if not isinstance(val, str):
            raise RuleError(f"{where}: 'fact' takes a fact name")
    elif key in _SOURCES:
        if not isinstance(val, dict) or "path" not in val:
            raise RuleError(f"{where}: '{key}' takes {{path: ..., <test>: ...}}")
        tests = [t for t in val if t != "path"]
        bad = [t for t in tests if t not in _TESTS]
        if bad or len(tests) > 1:
            raise RuleError(f"{where}: '{key}' takes one test of {', '.join(_TESTS)}, got {tests}")
        if key == "config":
            table = dskeys.table_for(None)
            p = re.sub(r"\[\d+\]", "", str(val["path"]))
            if not (table.is_known(p) or p in table.sections):
                raise RuleError(f"{where}: config path {val['path']!r} is not a key DeepSpeed "
                                f"{table.release} knows (dsdoctor/data/ds_keys_*.json)")
    else:
        raise RuleError(f"{where}: unknown condition {key!r}")


def _rule_from_yaml(data: Any, filename: str) -> Rule:
    if not isinstance(data, dict):
        raise RuleError(f"{filename}: a rule file is a mapping")
    for req in ("code", "name", "severity", "title", "summary", "explanation", "fix", "examples"):
        if not data.get(req):
            raise RuleError(f"{filename}: missing '{req}'")
    code, name, sev = str(data["code"]), str(data["name"]), str(data["severity"])
    if not _CODE.match(code):
        raise RuleError(f"{filename}: code {code!r} is not DSnnn")
    if not _NAME.match(name):
        raise RuleError(f"{filename}: name {name!r} is not kebab-case")
    if sev not in SEVERITIES:
        raise RuleError(f"{filename}: severity {sev!r} is not one of {', '.join(SEVERITIES)}")
    if filename != f"{code}-{name}.yaml":
        raise RuleError(f"{filename}: must be named {code}-{name}.yaml")
    when = data.get("when")
    if when is not None:
        _check_condition(when, filename)
    hook = data.get("hook")
    if hook is not None:
        if not isinstance(hook, str) or not _HOOK.match(hook):
            raise RuleError(f"{filename}: hook {hook!r} must be a check name (snake_case)")
        if hook not in _checks():
            raise RuleError(f"{filename}: hook {hook} is not a registered check "
                            "(dsdoctor/diagnose/checks/registry.py)")
    ex = data["examples"]
    if not isinstance(ex, dict) or not ex.get("fire") or not ex.get("silent"):
        raise RuleError(f"{filename}: needs examples.fire and examples.silent (at least one each)")
    examples: dict[str, tuple[dict[str, Any], ...]] = {}
    for kind in ("fire", "silent"):
        items = ex[kind]
        if not isinstance(items, list):
            raise RuleError(f"{filename}: examples.{kind} must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not item:
                raise RuleError(f"{filename}: examples.{kind}[{i}] must be a mapping of inputs")
            unknown = set(item) - _EXAMPLE_KEYS
            if unknown:
                raise RuleError(f"{filename}: examples.{kind}[{i}] has unknown inputs {sorted(unknown)}")
        examples[kind] = tuple(items)
    refs = data.get("references") or []
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise RuleError(f"{filename}: references must be a list of URLs")
    return Rule(code=code, name=name, severity=sev, title=str(data["title"]).strip(),
                summary=str(data["summary"]).strip(), explanation=str(data["explanation"]).strip(),
                fix=str(data["fix"]).strip(), references=tuple(refs), when=when, hook=hook,
                examples=examples, applies=str(data.get("applies", "")).strip(),
                category=str(data.get("category", "")).strip(), file=filename,
                verified=_verified_from_yaml(data.get("verified"), filename),
                retriable=_retriable_from_yaml(data.get("retriable"), filename,
                                               str(data.get("category", "")).strip()))


#: Whether a retry can help (issue 22): the answers, and the categories whose rules explain a
#: failure in the log and must say it (a config lint's answer is its category's: no).
RETRIABLE_VALUES = ("yes", "no", "unknown")
RETRIABLE_REQUIRED = ("symptom", "failure")


def _retriable_from_yaml(item: Any, filename: str, category: str) -> dict[str, Any] | None:
    """``retriable: {value, reason, needs_checkpoint?, cases?: [{text, value, reason}]}``:
    ``cases`` are tried in order against the problem's evidence lines (a regex, case-insensitive)
    before ``value``; ``needs_checkpoint`` makes a yes unknown when the log shows no save."""
    where = f"{filename}: retriable"
    if item is None:
        if category in RETRIABLE_REQUIRED:
            raise RuleError(f"{where} is required for a {category} rule: {{value: yes|no|unknown, "
                            "reason: ...}} (whether a retry of the failed job can help, and why)")
        return None
    if not isinstance(item, dict) or set(item) - {"value", "reason", "needs_checkpoint", "cases"}:
        raise RuleError(f"{where} takes value, reason, needs_checkpoint and cases")

    def answer(d: Any, at: str) -> tuple[str, str]:
        value, reason = d.get("value"), d.get("reason")
        if isinstance(value, bool):
            raise RuleError(f"{at}: value must be quoted ('yes', 'no'): YAML reads yes/no as true/false")
        if value not in RETRIABLE_VALUES:
            raise RuleError(f"{at}: value {value!r} is not one of {', '.join(RETRIABLE_VALUES)}")
        if not isinstance(reason, str) or not reason.strip():
            raise RuleError(f"{at}: needs a reason (why a retry can or cannot help)")
        return str(value), " ".join(reason.split())

    value, reason = answer(item, where)
    cases = []
    for i, case in enumerate(item.get("cases") or []):
        at = f"{where}.cases[{i}]"
        if not isinstance(case, dict) or set(case) != {"text", "value", "reason"}:
            raise RuleError(f"{at} takes text (a regex), value and reason")
        try:
            re.compile(str(case["text"]))
        except re.error as exc:
            raise RuleError(f"{at}: text is not a regex ({exc})") from None
        cvalue, creason = answer(case, at)
        cases.append({"text": str(case["text"]), "value": cvalue, "reason": creason})
    needs = item.get("needs_checkpoint", False)
    if not isinstance(needs, bool):
        raise RuleError(f"{where}.needs_checkpoint is true or false")
    return {"value": value, "reason": reason, "needs_checkpoint": needs, "cases": cases}


def _verified_from_yaml(items: Any, filename: str) -> tuple[Verified, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise RuleError(f"{filename}: verified must be a list of {{claim, source, holds, quote}}")
    out = []
    for i, item in enumerate(items):
        where = f"{filename}: verified[{i}]"
        if not isinstance(item, dict) or set(item) - {"claim", "source", "holds", "quote"}:
            raise RuleError(f"{where} takes claim, source, holds and (for code) quote")
        if not all(isinstance(item.get(k), str) and item[k].strip() for k in ("claim", "source", "holds")):
            raise RuleError(f"{where} needs claim, source and holds as text")
        v = Verified(claim=item["claim"].strip(), source=item["source"].strip(),
                     holds=item["holds"].strip(), quote=str(item.get("quote") or "").strip())
        if not (_CODE_SOURCE.match(v.source) or _TEST_SOURCE.match(v.source)
                or _THREAD_SOURCE.match(v.source)):
            raise RuleError(f"{where}: source {v.source!r} is not owner/repo@TAG:path:LINE[-LINE], "
                            "tests/<file>.py::<test>, or a thread URL")
        if v.kind == "code" and not v.quote:
            raise RuleError(f"{where}: a code source needs a quote from the cited lines")
        if not _HOLDS.match(v.holds):
            raise RuleError(f"{where}: holds {v.holds!r} is not '<package> [>=X,<Y]'")
        out.append(v)
    return tuple(out)


@lru_cache(maxsize=4)
def _load_rules_cached(directory: str | None) -> tuple[Rule, ...]:
    if directory is None:
        return _shipped_rules()
    else:
        import os

        entries = []
        for n in os.listdir(directory):
            if n.endswith(".yaml"):
                with open(os.path.join(directory, n), encoding="utf-8") as fh:
                    entries.append((n, fh.read()))
    return _rules_from_texts(entries)


#: The shape of a cached rule: changed whenever a Rule field is added, so an older cache is rebuilt.
_RULE_CACHE_SCHEMA = "rule-3:retriable"


def _shipped_rules() -> tuple[Rule, ...]:
    """The shipped rules, validated once and kept in dsdoctor's private data cache
    (datacache.py), keyed by the rule files and the DeepSpeed key tables they are checked
    against: parsing and validating them costs more than analyzing a small log."""
    from dsdoctor.datacache import cached_files, package_files  # noqa: PLC0415

    files = package_files("dsdoctor.rules", lambda n: n.endswith(".yaml"))
    files += [(f"data/{n}", path) for n, path in package_files(
        "dsdoctor.data", lambda n: n.startswith("ds_keys_") and n.endswith(".json"))]

    def build(sources: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
        texts = [(n, b.decode("utf-8")) for n, b in sources if not n.startswith("data/")]
        return [dataclasses.asdict(r) for r in _rules_from_texts(texts)]

    rules = [Rule(**{**d, "references": tuple(d["references"]),
                     "examples": {k: tuple(v) for k, v in d["examples"].items()},
                     "verified": tuple(Verified(**v) for v in d["verified"])})
             for d in cached_files("rules", files, build, schema=_RULE_CACHE_SCHEMA)]
    for rule in rules:  # the check registry is code, not in the cache key: look again
        if rule.hook is not None and rule.hook not in _checks():
            raise RuleError(f"{rule.file}: hook {rule.hook} is not a registered check "
                            "(dsdoctor/diagnose/checks/registry.py)")
    _check_registry_used(rules)
    return tuple(rules)


def _rules_from_texts(entries: list[tuple[str, str]]) -> tuple[Rule, ...]:
    import yaml  # noqa: PLC0415 - the cache usually spares parsing YAML

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    rules: list[Rule] = []
    codes: dict[str, str] = {}
    names: dict[str, str] = {}
    for filename, text in sorted(entries):
        try:
            data = yaml.load(text, Loader=loader)  # noqa: S506 - safe (C) loader
        except yaml.YAMLError as exc:
            raise RuleError(f"{filename}: not valid YAML ({exc})") from None
        rule = _rule_from_yaml(data, filename)
        if rule.code in codes:
            raise RuleError(f"{filename}: code {rule.code} already used by {codes[rule.code]}")
        if rule.name in names:
            raise RuleError(f"{filename}: name {rule.name} already used by {names[rule.name]}")
        codes[rule.code], names[rule.name] = filename, filename
        rules.append(rule)
    return tuple(rules)


def _check_registry_used(rules: list[Rule]) -> None:
    """Every registered check belongs to a shipped rule, and no two rules share one."""
    owners: dict[str, str] = {}
    for rule in rules:
        if rule.hook is not None:
            if rule.hook in owners:
                raise RuleError(f"{rule.file}: hook {rule.hook} already used by {owners[rule.hook]}")
            owners[rule.hook] = rule.file
    orphans = sorted(set(_checks()) - set(owners))
    if orphans:
        raise RuleError(f"checks registered without a rule: {', '.join(orphans)} "
                        "(dsdoctor/diagnose/checks/registry.py)")


def load_rules(directory: str | None = None) -> list[Rule]:
    """Every rule, sorted by code, with invariants checked (raises :class:`RuleError`)."""
    return list(_load_rules_cached(directory))


def find_rule(key: str, rules: Iterable[Rule] | None = None) -> Rule | None:
    """A rule by code (case-insensitive) or name."""
    k = key.strip()
    for r in rules if rules is not None else load_rules():
        if r.code.lower() == k.lower() or r.name == k.lower():
            return r
    return None


# --------------------------------------------------------------------------------- evaluation

def _source_value(ctx: Context, source: str, path: str) -> tuple[bool, Any]:
    """(exists, value) of ``path`` in one input of the context."""
    if source == "config":
        base: Any = ctx.ds.data if ctx.ds is not None else None
    elif source == "accelerate":
        base = ctx.accelerate.data if ctx.accelerate is not None else None
    elif source == "env":
        base = ctx.env
    elif source == "args":
        base = ctx.trainer_args
    else:  # model: a dataclass or a dict
        base = ctx.model
        if base is not None and dataclasses.is_dataclass(base) and not isinstance(base, type):
            base = dataclasses.asdict(base)
        elif base is not None and not isinstance(base, dict):
            base = vars(base)
    if base is None:
        return False, None
    value = lookup(base, path, _MISSING)
    return (value is not _MISSING), (None if value is _MISSING else value)


def _test(spec: dict[str, Any], exists: bool, value: Any) -> bool:
    for test, want in spec.items():
        if test == "path":
            continue
        if test == "exists":
            return exists == bool(want)
        if not exists:
            return False
        if test == "equals":
            # True == 1 in Python; a config's true and 1 are different things to DeepSpeed's checks.
            if isinstance(want, bool) or isinstance(value, bool):
                return value is want
            return value == want
        if test == "in":
            return value in (want or [])
        if test == "truthy":
            return bool(value) == bool(want)
        n, w = dskeys.as_real(value), dskeys.as_real(want)
        if n is None or w is None:
            return False
        return {"gt": n > w, "ge": n >= w, "lt": n < w, "le": n <= w}[test]
    return exists


def condition_holds(cond: dict[str, Any] | None, ctx: Context) -> bool:
    """Evaluate a declarative ``when:`` condition against the context."""
    if cond is None:
        return True
    (key, val), = cond.items()
    if key == "all":
        return all(condition_holds(c, ctx) for c in val)
    if key == "any":
        return any(condition_holds(c, ctx) for c in val)
    if key == "not":
        return not condition_holds(val, ctx)
    if key == "symptom":
        kinds = [val] if isinstance(val, str) else val
        return any(ctx.has_symptom(k) for k in kinds)
    if key == "fact":
        return bool(ctx.facts_named(val))
    exists, value = _source_value(ctx, key, val["path"])
    return _test(val, exists, value)


def _first_config_path(cond: Any) -> str | None:
    if isinstance(cond, dict):
        for key, val in cond.items():
            if key == "config" and isinstance(val, dict):
                return val.get("path")
            if key in ("all", "any"):
                for c in val:
                    p = _first_config_path(c)
                    if p:
                        return p
    return None


def _complete(item: Any, rule: Rule, ctx: Context) -> Finding:
    """Fill a hook's finding (or dict) with the rule's defaults and the config location."""
    if isinstance(item, dict):
        item = Finding(rule=item.pop("rule", ""), name=item.pop("name", ""),
                       severity=item.pop("severity", ""), title=item.pop("title", ""),
                       message=item.pop("message", ""), **item)
    if not isinstance(item, Finding):
        raise TypeError(f"{rule.code} hook returned {type(item).__name__}, not a Finding or dict")
    changes: dict[str, Any] = {}
    for attr, default in (("rule", rule.code), ("name", rule.name), ("severity", rule.severity),
                          ("title", rule.title), ("message", rule.summary), ("fix", rule.fix)):
        if not getattr(item, attr):
            changes[attr] = default
    if not item.references and rule.references:
        changes["references"] = rule.references
    path = item.config_path
    ds = ctx.ds
    if path and ds is not None and ds.synthesized and item.config_file is None:
        # The user wrote an Accelerate config: point at its key, not at a DeepSpeed key they
        # never wrote (Accelerate built the DeepSpeed config from it).
        accel = ds.source_keys.get(path)
        if accel is not None:
            changes["config_path"] = accel
            changes["fix"] = f"{changes.get('fix', item.fix)} (Accelerate config: {accel})"
            changes["fix_change"] = None
    # Locate DeepSpeed paths in the effective config; CLI argument names have no line.
    if (path and item.config_line is None and ctx.ds is not None and ctx.ds_source != "log"
            and (ctx.ds.has(path) or "." in path or path in ctx.ds.positions)):
            line = ctx.ds.line(path)
            if line is not None:
                changes["config_line"] = line
                if item.config_file is None:
                    changes["config_file"] = ctx.ds.path
    return dataclasses.replace(item, **changes) if changes else item


def _evidence_for(rule: Rule, ctx: Context) -> tuple[Any, ...]:
    ev: list[Any] = []
    for kind in rule.symptoms:
        s = ctx.symptom(kind)
        if s is not None:
            ev.extend(s.evidence)
    return tuple(ev)


def evaluate_rule(rule: Rule, ctx: Context) -> list[Finding]:
    """Findings of one rule (its ``when`` gate, then its hook or its own texts)."""
    if not condition_holds(rule.when, ctx):
        return []
    fn = rule.hook_fn()
    if fn is None:
        path = _first_config_path(rule.when)
        f = Finding(rule=rule.code, name=rule.name, severity=rule.severity, title=rule.title,
                    message=rule.summary, fix=rule.fix, config_path=path,
                    evidence=_evidence_for(rule, ctx), references=rule.references)
        return [_complete(f, rule, ctx)]
    return [_complete(item, rule, ctx) for item in (fn(ctx, rule) or [])]


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; by code, then config line."""
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER.get(f.severity, 99), f.rule,
                                          f.config_line or 0, f.config_path or ""))


def evaluate(ctx: Context, rules: Iterable[Rule] | None = None, strict: bool = False) -> list[Finding]:
    """Run every rule on the context; findings sorted by severity then code.

    A rule that crashes (a dsdoctor bug on some odd input) must not cost the user the whole
    report: it becomes a note naming the rule, unless ``strict`` (tests) re-raises it.
    """
    out: list[Finding] = []
    for rule in rules if rules is not None else load_rules():
        try:
            out.extend(evaluate_rule(rule, ctx))
        except Exception as exc:  # noqa: BLE001 - isolate one rule's bug from the report
            if strict:
                raise
            ctx.notes.append(f"{rule.code} could not run ({type(exc).__name__}: {exc}); this is "
                             "a dsdoctor bug, please report it with 'dsdoctor report'")
    return sort_findings(_without_unexplained_exit(ctx, out))


#: Rules whose claim is that nothing more specific explains the failure (DS113's title).
_FALLBACK_RULES = ("rank-exited-nonzero",)


def _without_unexplained_exit(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Drop the fallback exit finding when another finding quotes the exception the rank died on
    (DS216 quotes ZeRO's assertion, DS223 Transformers' tf32 refusal): that finding explains it."""
    exc = ctx.symptom("python-exception")
    if exc is None:
        return findings
    lines = {(e.file, e.line) for e in exc.evidence}
    explained = any(f.name not in _FALLBACK_RULES and
                    any((e.file, e.line) in lines for e in f.evidence) for f in findings)
    return [f for f in findings if not (explained and f.name in _FALLBACK_RULES)]


__all__ = ["Rule", "RuleError", "load_rules", "find_rule", "evaluate", "evaluate_rule",
           "condition_holds", "sort_findings"]
