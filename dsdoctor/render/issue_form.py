"""The GitHub issue form that ``dsdoctor issue-template`` writes, and a validator for issue forms.

The validator implements the rules of GitHub's form schema ("Syntax for issue forms" and "Syntax
for GitHub's form schema" in GitHub's documentation): the top-level keys, the five element types,
their required attributes, unique ids and labels, and ``validations.required``. GitHub refuses a
form that breaks them and silently falls back to a blank issue, so the shipped form is checked
before it is written and in the tests.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

TEMPLATE_NAME = "training-failure.yml"
DEFAULT_PATH = f".github/ISSUE_TEMPLATE/{TEMPLATE_NAME}"

_TOP_REQUIRED = ("name", "description", "body")
_TOP_ALLOWED = frozenset({"name", "description", "body", "title", "labels", "assignees", "projects",
                          "type"})
_ELEMENT_KEYS = frozenset({"type", "id", "attributes", "validations"})
# Attributes allowed (and required) per element type.
_ATTRS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "markdown": (frozenset({"value"}), ("value",)),
    "textarea": (frozenset({"label", "description", "placeholder", "value", "render"}), ("label",)),
    "input": (frozenset({"label", "description", "placeholder", "value"}), ("label",)),
    "dropdown": (frozenset({"label", "description", "multiple", "options", "default"}),
                 ("label", "options")),
    "checkboxes": (frozenset({"label", "description", "options"}), ("label", "options")),
}
_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def template_text() -> str:
    """The shipped issue form (YAML text)."""
    return resources.files("dsdoctor.data").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(_nonempty_str(x) for x in v) or _nonempty_str(v)


def validate_form(form: Any) -> list[str]:
    """Every way ``form`` (parsed YAML) breaks GitHub's issue-form rules; empty when valid."""
    errs: list[str] = []
    if not isinstance(form, dict):
        return ["the form must be a YAML mapping with name, description and body"]
    for key in _TOP_REQUIRED:
        if key not in form:
            errs.append(f"missing top-level key '{key}'")
    for key in form:
        if key not in _TOP_ALLOWED:
            errs.append(f"unknown top-level key '{key}'")
    for key in ("name", "description"):
        if key in form and not _nonempty_str(form[key]):
            errs.append(f"'{key}' must be a non-empty string")
    if "title" in form and not isinstance(form["title"], str):
        errs.append("'title' must be a string")
    for key in ("labels", "assignees", "projects"):
        if key in form and not _str_list(form[key]):
            errs.append(f"'{key}' must be a string or a list of strings")
    body = form.get("body")
    if "body" in form and (not isinstance(body, list) or not body):
        errs.append("'body' must be a non-empty list of elements")
        return errs
    if not isinstance(body, list):
        return errs
    ids: set[str] = set()
    labels: set[str] = set()
    has_input = False
    for i, el in enumerate(body):
        where = f"body[{i}]"
        if not isinstance(el, dict):
            errs.append(f"{where}: an element must be a mapping")
            continue
        typ = el.get("type")
        if typ not in _ATTRS:
            errs.append(f"{where}: type must be one of {', '.join(sorted(_ATTRS))}, got {typ!r}")
            continue
        where = f"body[{i}] ({typ})"
        for key in el:
            if key not in _ELEMENT_KEYS:
                errs.append(f"{where}: unknown key '{key}'")
        if typ != "markdown":
            has_input = True
        if "id" in el:
            if typ == "markdown":
                errs.append(f"{where}: markdown elements take no id")
            elif not isinstance(el["id"], str) or not _ID_RE.match(el["id"]):
                errs.append(f"{where}: id must contain only letters, digits, '-' and '_'")
            elif el["id"] in ids:
                errs.append(f"{where}: duplicate id '{el['id']}'")
            else:
                ids.add(el["id"])
        attrs = el.get("attributes")
        if not isinstance(attrs, dict):
            errs.append(f"{where}: 'attributes' is required and must be a mapping")
            continue
        allowed, required = _ATTRS[typ]
        for key in required:
            if key not in attrs:
                errs.append(f"{where}: attributes.{key} is required")
        for key in attrs:
            if key not in allowed:
                errs.append(f"{where}: attribute '{key}' is not allowed for {typ}")
        if typ == "markdown":
            if "value" in attrs and not _nonempty_str(attrs["value"]):
                errs.append(f"{where}: attributes.value must be a non-empty string")
            if "validations" in el:
                errs.append(f"{where}: markdown elements take no validations")
        else:
            label = attrs.get("label")
            if "label" in attrs and not _nonempty_str(label):
                errs.append(f"{where}: attributes.label must be a non-empty string")
            elif isinstance(label, str) and _nonempty_str(label):
                if label in labels:
                    errs.append(f"{where}: duplicate label '{label}' (labels must be unique)")
                labels.add(label)
            for key in ("description", "placeholder", "value", "render"):
                if key in attrs and not isinstance(attrs[key], str):
                    errs.append(f"{where}: attributes.{key} must be a string")
            if "validations" in el:
                v = el["validations"]
                if not isinstance(v, dict) or set(v) - {"required"}:
                    errs.append(f"{where}: validations may only hold 'required'")
                elif "required" in v and not isinstance(v["required"], bool):
                    errs.append(f"{where}: validations.required must be true or false")
        opts = attrs.get("options")
        if typ in ("dropdown", "checkboxes") and "options" in attrs:
            if not isinstance(opts, list) or not opts:
                errs.append(f"{where}: options must be a non-empty list")
            elif typ == "dropdown":
                if not all(_nonempty_str(o) for o in opts):
                    errs.append(f"{where}: every option must be a non-empty string")
                elif len(set(opts)) != len(opts):
                    errs.append(f"{where}: options must be distinct")
                elif any(o.strip().lower() == "none" for o in opts):
                    errs.append(f"{where}: 'None' is reserved and cannot be an option")
                d = attrs.get("default")
                if d is not None and (not isinstance(d, int) or isinstance(d, bool)
                                      or not 0 <= d < len(opts)):
                    errs.append(f"{where}: default must be the index of an option")
            else:
                for j, o in enumerate(opts):
                    if not isinstance(o, dict) or not _nonempty_str(o.get("label")):
                        errs.append(f"{where}: options[{j}] needs a non-empty label")
                    elif set(o) - {"label", "required"}:
                        errs.append(f"{where}: options[{j}] may only hold label and required")
                    elif "required" in o and not isinstance(o["required"], bool):
                        errs.append(f"{where}: options[{j}].required must be true or false")
        if typ == "dropdown" and "multiple" in attrs and not isinstance(attrs["multiple"], bool):
            errs.append(f"{where}: multiple must be true or false")
    if body and not has_input:
        errs.append("body must contain at least one non-markdown element")
    return errs


def load_form(text: str) -> Any:
    """Parse issue-form YAML safely (no custom tags, no code)."""
    import yaml  # noqa: PLC0415 - every command imports this module to register its options

    return yaml.safe_load(text)
