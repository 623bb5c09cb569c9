"""Static facts about a training script, from its syntax tree only (never imported or run).

What the DeepSpeed integration guides make matter: ``generate(...)`` calls and their
``synced_gpus`` argument (ZeRO-3 on several GPUs hangs without it), ``HfDeepSpeedConfig`` kept
alive and created before ``from_pretrained`` (ZeRO-3 sharded loading), ``TrainingArguments``
created before ``from_pretrained`` under ZeRO-3, adapter merging under DeepSpeed, QLoRA's
``torch_dtype`` vs ``bnb_4bit_quant_storage``, and whether the HF Trainer or Accelerate drive the
run (which is what makes ``"auto"`` legal in a DeepSpeed config). Every fact carries its line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.facts.loopcalls import LoopCalls, LoopCallsSeen
from dsdoctor.facts.pyparse import MAX_PARSE_TOKENS, ParseBudgetError, parse_bounded
from dsdoctor.facts.scriptnames import (
    Bindings,
    BindingsSeen,
    dotted,
    dtype_literal,
    makes_inputs,
)
from dsdoctor.safeio import MAX_SCRIPT_BYTES, read_bounded

# Above this, a script is parsed in pieces of top-level statements, each once, so that only one
# piece's syntax tree is alive at a time: the tree of a whole 7 MB script took 1.1 GB.
CHUNKED_SOURCE_BYTES = 1 << 20
_CHUNK_CHARS = 256 << 10
# a line at column 0 starting with one of these continues the statement before it
_CONTINUES = ("else", "elif", "except", "finally", "#", ")", "]", "}", "@")

_TRAINER_CLASSES = {"Trainer", "Seq2SeqTrainer", "SFTTrainer", "DPOTrainer", "PPOTrainer",
                    "RewardTrainer", "ORPOTrainer", "KTOTrainer", "GRPOTrainer", "CPOTrainer"}
_TRAINING_ARGS = {"TrainingArguments", "Seq2SeqTrainingArguments", "SFTConfig", "DPOConfig",
                  "PPOConfig", "RewardConfig", "ORPOConfig", "KTOConfig", "GRPOConfig"}
# from_pretrained receivers that load no model weights (no ZeRO-3 partitioning involved).
_NOT_MODELS = ("Tokenizer", "Config", "Processor", "FeatureExtractor", "GenerationConfig")
_MERGE_METHODS = {"merge_and_unload", "merge_adapter"}


@dataclass(frozen=True)
class Site:
    """Where something happens in the script."""

    line: int
    col: int
    scope: str  # enclosing function/class qualname, "<module>" at top level
    text: str = ""  # a short rendering of the call (first line, capped)


@dataclass(frozen=True)
class GenerateCall:
    """A ``.generate(...)`` call and what it passes as ``synced_gpus``."""

    site: Site
    synced_gpus: bool | str | None  # True/False literal; "expr" non-literal; None: not passed
    has_kwargs: bool  # ``**kwargs`` present (synced_gpus may hide inside)


@dataclass(frozen=True)
class HfDsConfig:
    """An ``HfDeepSpeedConfig(...)`` construction and whether its object is kept alive."""

    site: Site
    kept_alive: bool  # assigned to a name/attribute (a bare call is garbage-collected at once)


@dataclass(frozen=True)
class DtypeUse:
    """A dtype passed to ``from_pretrained(torch_dtype=...)`` or a BitsAndBytesConfig field."""

    site: Site
    key: str  # torch_dtype | dtype | bnb_4bit_quant_storage | bnb_4bit_compute_dtype
    value: str | None  # "bfloat16", "float16", "float32", "auto", or None when not literal


@dataclass(frozen=True)
class ScriptFacts:
    """Everything :func:`check_script` found, each with its line."""

    path: str
    generate_calls: tuple[GenerateCall, ...] = ()
    hf_ds_configs: tuple[HfDsConfig, ...] = ()
    from_pretrained: tuple[Site, ...] = ()  # model loads only (not tokenizers/configs)
    from_pretrained_splat: tuple[Site, ...] = ()  # those passing **kwargs (dtype unknown)
    training_args: tuple[Site, ...] = ()
    trainers: tuple[Site, ...] = ()
    accelerators: tuple[Site, ...] = ()
    ds_initialize: tuple[Site, ...] = ()
    # deepspeed.initialize calls passing ``mpu=`` (not None): DeepSpeed's batch check then counts
    # the mpu's data-parallel ranks; without one, AutoTP from the config counts every rank (DS309)
    ds_initialize_mpu: tuple[Site, ...] = ()
    merges: tuple[Site, ...] = ()
    dtypes: tuple[DtypeUse, ...] = ()
    imports: tuple[str, ...] = ()  # top-level package names imported
    uses_peft: bool = False
    # literal keyword values of TrainingArguments(...)-like calls: (argument, value, line)
    training_arg_values: tuple[tuple[str, Any, int], ...] = ()
    quant_4bit: tuple[Site, ...] = ()  # load_in_4bit=True (BitsAndBytesConfig, from_pretrained)
    loop_calls: LoopCalls | None = None  # for DS220/DS221, found in the same visit

    # ------------------------------------------------------------------ derived facts
    @property
    def uses_trainer(self) -> bool:
        """The HF Trainer (or a TRL trainer) drives training: it fills ``"auto"`` values."""
        return bool(self.trainers or self.training_args)

    @property
    def uses_accelerate(self) -> bool:
        """Accelerate drives training (``Accelerator(...)``): it also fills ``"auto"``."""
        return bool(self.accelerators)

    @property
    def uses_deepspeed(self) -> bool:
        """The script touches DeepSpeed directly (import, ``deepspeed.initialize``, HfDeepSpeedConfig)."""
        return "deepspeed" in self.imports or bool(self.ds_initialize or self.hf_ds_configs)

    def generate_without_sync(self) -> list[GenerateCall]:
        """``generate`` calls that pass ``synced_gpus=False`` or do not pass it at all."""
        return [g for g in self.generate_calls if g.synced_gpus is False
                or (g.synced_gpus is None and not g.has_kwargs)]

    def hf_ds_config_problems(self) -> list[tuple[Site, str]]:
        """HfDeepSpeedConfig objects dropped at once, or created after the model is loaded."""
        out: list[tuple[Site, str]] = []
        for h in self.hf_ds_configs:
            if not h.kept_alive:
                out.append((h.site, "not kept alive: the object is not assigned, so it is "
                            "garbage-collected before from_pretrained can see it"))
            first = _first_in_scope(self.from_pretrained, h.site.scope)
            if first is not None and first.line < h.site.line:
                out.append((h.site, f"created after from_pretrained (line {first.line}): "
                            "the model was already loaded whole on every rank"))
        return out

    def training_args_after_from_pretrained(self) -> list[tuple[Site, Site]]:
        """(TrainingArguments site, earlier from_pretrained site) pairs in the same scope."""
        out = []
        for ta in self.training_args:
            first = _first_in_scope(self.from_pretrained, ta.scope)
            if first is not None and first.line < ta.line:
                out.append((ta, first))
        return out

    def quant_storage_mismatches(self) -> list[tuple[DtypeUse, DtypeUse]]:
        """(torch_dtype use, bnb_4bit_quant_storage use) pairs whose literal dtypes differ."""
        storages = [d for d in self.dtypes if d.key == "bnb_4bit_quant_storage" and d.value]
        loads = [d for d in self.dtypes if d.key in ("torch_dtype", "dtype") and d.value
                 and d.value != "auto"]
        return [(ld, st) for st in storages for ld in loads if ld.value != st.value]

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        d = asdict(self)
        del d["loop_calls"]  # read by checks, not a fact of its own
        d.update(uses_trainer=self.uses_trainer, uses_accelerate=self.uses_accelerate,
                 uses_deepspeed=self.uses_deepspeed)
        return d


def _first_in_scope(sites: tuple[Site, ...], scope: str) -> Site | None:
    same = [s for s in sites if s.scope == scope]
    return min(same, key=lambda s: s.line) if same else None


# ------------------------------------------------------------------------------------- parsing

def check_script(path: str | Path) -> ScriptFacts:
    """Parse ``path`` (never import or run it) and collect its facts.

    Raises UsageError for an unreadable file or a syntax error (``file:line:col: ...``).
    """
    # a FIFO or device is refused before reading; the read is capped (issue 14, item 4)
    raw = read_bounded(str(path), MAX_SCRIPT_BYTES, "--script",
                       "pass the training script (.py) that builds the model")
    return check_source(raw, str(path))


def check_source(source: str | bytes, path: str = "<script>") -> ScriptFacts:
    """Collect facts from Python source text (bytes honour a PEP 263 encoding cookie)."""
    if isinstance(source, bytes) and b"\x00" in source:
        raise UsageError(f"{path}: binary file (NUL bytes), not a Python script; pass the .py "
                         "training script")
    if len(source) > CHUNKED_SOURCE_BYTES:
        facts = _check_in_chunks(source, path)
        if facts is not None:
            return facts
    try:
        tree = parse_bounded(source, filename=path)
    except ParseBudgetError as exc:
        raise UsageError(f"{path}: {exc} that cannot be cut at a top-level statement (one "
                         f"expression of megabytes, or unbalanced brackets); dsdoctor parses at "
                         f"most {MAX_PARSE_TOKENS:,} tokens at once to bound its memory: pass the "
                         "training script") from None
    except SyntaxError as exc:
        line, col = exc.lineno or 0, (exc.offset or 0)
        raise UsageError(f"{path}:{line}:{col}: syntax error: {exc.msg}; dsdoctor reads the "
                         "script without running it, so it must be valid Python 3") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a Python source file ({exc}); pass the .py training "
                         "script") from None
    except (RecursionError, MemoryError):
        raise UsageError(f"{path}: nested too deeply to analyze; pass the training script") \
            from None
    v = _Visitor(source if isinstance(source, str) else source.decode("utf-8", "replace"))
    try:
        v.visit(tree)
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to analyze; pass the training script") \
            from None
    return _facts(path, v)


def _facts(path: str, v: _Visitor) -> ScriptFacts:
    v.resolve()
    return ScriptFacts(
        path=path, generate_calls=tuple(v.generate), hf_ds_configs=tuple(v.hfds),
        from_pretrained=tuple(v.from_pretrained), training_args=tuple(v.training_args),
        from_pretrained_splat=tuple(v.from_pretrained_splat),
        trainers=tuple(v.trainers), accelerators=tuple(v.accelerators),
        ds_initialize=tuple(v.ds_init), ds_initialize_mpu=tuple(v.ds_init_mpu),
        merges=tuple(v.merges), dtypes=tuple(v.dtypes),
        imports=tuple(sorted(v.imports)), uses_peft=v.uses_peft or "peft" in v.imports,
        training_arg_values=tuple(v.training_arg_values), quant_4bit=tuple(v.quant_4bit),
        loop_calls=v.loops.result(path))


def _chunks(text: str) -> list[tuple[int, str]]:
    """(first line - 1, text) pieces of about _CHUNK_CHARS, cut before a line at column 0 that
    can start a statement. A cut inside a string, brackets or a continued line leaves a piece
    that is not valid Python: the caller then parses the whole text."""
    lines = text.splitlines(keepends=True)
    out: list[tuple[int, str]] = []
    start = 0
    size = 0
    for i, line in enumerate(lines):
        if size >= _CHUNK_CHARS and line[:1] not in ("", " ", "\t", "\n", "\r") \
                and not line.startswith(_CONTINUES) and not lines[i - 1].rstrip("\r\n").endswith("\\"):
            out.append((start, "".join(lines[start:i])))
            start, size = i, 0
        size += len(line)
    out.append((start, "".join(lines[start:])))
    return out


def _check_in_chunks(source: str | bytes, path: str) -> ScriptFacts | None:
    """The facts of a big script, one piece of its syntax tree at a time (see _chunks); None when
    it cannot be cut that way (then the whole text is parsed, and its errors reported)."""
    if isinstance(source, bytes):
        if not source.isascii():
            return None  # a coding cookie or UTF-8 text: the whole-file parse decodes it
        source = source.decode("ascii")
    v = _Visitor(source)
    try:
        for first, text in _chunks(source):
            # blank lines in front keep the line numbers of the whole file
            v.visit(parse_bounded("\n" * first + text, filename=path))
            v._kept.clear()  # ids of a freed tree's nodes may come back in the next one
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _facts(path, v)


_NOT_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    """A keyword's value when it is a literal (``8``, ``True``, ``"ds.json"``), else _NOT_LITERAL."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


# Nodes with nothing below them that any visit method or binding looks at: the visit does not
# descend into them (names, literals and operators are most of a script's nodes).
_LEAVES = (ast.Name, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop,
           ast.boolop, ast.alias)


class _Visitor(ast.NodeVisitor):
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.scope: list[str] = []
        self.generate: list[GenerateCall] = []
        self.hfds: list[HfDsConfig] = []
        self.from_pretrained: list[Site] = []
        self.from_pretrained_splat: list[Site] = []
        self.training_args: list[Site] = []
        self.trainers: list[Site] = []
        self.accelerators: list[Site] = []
        self.ds_init: list[Site] = []
        self.ds_init_mpu: list[Site] = []
        self.merges: list[Site] = []
        self._gathered = 0  # depth of `with ...GatheredParameters(...)` blocks around the node
        self.dtypes: list[DtypeUse] = []
        self.imports: set[str] = set()
        self.uses_peft = False
        self.training_arg_values: list[tuple[str, Any, int]] = []
        self.quant_4bit: list[Site] = []
        self._kept: set[int] = set()  # id() of Call nodes whose value is stored
        self._seen = BindingsSeen()
        self.loops = LoopCallsSeen(self.lines)
        self.bindings = Bindings({}, set(), set())  # set by resolve(), after the whole script
        # facts that depend on a binding, resolved once the whole script is seen: (index in
        # self.generate, the ``**`` values) and (index in self.dtypes, the dtype expression)
        self._kwargs_of: list[tuple[int, list[ast.expr]]] = []
        self._dtype_of: list[tuple[int, ast.expr]] = []
        self._methods: dict[type, Any] = {}
        # names bound to HfArgumentParser(...) objects whose dataclasses include TrainingArguments
        self._ta_parsers: set[str] = set()

    # ----------------------------------------------------------------------- traversal
    # NodeVisitor's own visit/generic_visit look the method up by name for every node and walk
    # every field through iter_fields: over a 7 MB script that walk was most of the time.
    def visit(self, node: ast.AST) -> None:
        kind = type(node)
        method = self._methods.get(kind)
        if method is None:
            method = self._methods[kind] = getattr(self, "visit_" + kind.__name__,
                                                   self.generic_visit)
        method(node)

    def generic_visit(self, node: ast.AST) -> None:
        visit = self.visit
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                        visit(item)
            elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                visit(value)

    def resolve(self) -> None:
        """Fill in the facts that depend on what names are bound to, anywhere in the script."""
        self.bindings = self._seen.result()
        for i, values in self._kwargs_of:
            if any(not self._plain_inputs(value) for value in values):
                self.generate[i] = replace(self.generate[i], has_kwargs=True)
        for i, expr in self._dtype_of:
            self.dtypes[i] = replace(self.dtypes[i],
                                     value=dtype_literal(expr, self.bindings.dtypes))
        self._kwargs_of.clear()
        self._dtype_of.clear()

    # ----------------------------------------------------------------------- helpers
    def _site(self, node: ast.AST) -> Site:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip()[:160] if 0 < line <= len(self.lines) else ""
        return Site(line, getattr(node, "col_offset", 0), ".".join(self.scope) or "<module>", text)

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    # ----------------------------------------------------------------------- scopes
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:  # class MyTrainer(Trainer): the Trainer drives the run
            if dotted(base).split(".")[-1] in _TRAINER_CLASSES:
                self.trainers.append(self._site(node))
        self._scoped(node, node.name)

    # ----------------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        self.imports.update(a.name.split(".")[0] for a in node.names)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            self.imports.add(node.module.split(".")[0])
        self.generic_visit(node)

    # ----------------------------------------------------------------------- assignments
    def _mark_kept(self, value: ast.AST | None) -> None:
        if isinstance(value, ast.Call):
            self._kept.add(id(value))

    def visit_Assign(self, node: ast.Assign) -> None:
        self._seen.assign(node)
        self.loops.assign(node)
        self._mark_kept(node.value)
        if isinstance(node.value, ast.Call) and _is_ta_parser(node.value):
            self._ta_parsers.update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._seen.assign(node)
        self._mark_kept(node.value)
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._seen.loop(node)
        self.generic_visit(node)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._mark_kept(node.value)
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._mark_kept(item.context_expr)
        # PEFT's DeepSpeed guide merges inside deepspeed.zero.GatheredParameters (the full
        # weights gathered): a merge there is the supported way, not DS207's
        gathers = any(isinstance(i.context_expr, ast.Call)
                      and dotted(i.context_expr.func).endswith("GatheredParameters")
                      for i in node.items)
        self._gathered += gathers
        self.generic_visit(node)
        self._gathered -= gathers

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.loops.name(node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        self.loops.name(node)

    # ----------------------------------------------------------------------- calls
    def visit_Call(self, node: ast.Call) -> None:
        self._seen.call(node)
        self.loops.call(node)
        callee = dotted(node.func)
        last = callee.split(".")[-1] if callee else ""
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if isinstance(node.func, ast.Attribute) and node.func.attr == "generate":
            sg = kw.get("synced_gpus")
            val: bool | str | None
            if sg is None:
                val = None
            elif isinstance(sg, ast.Constant) and isinstance(sg.value, bool):
                val = sg.value
            else:
                val = "expr"
            # ``**x`` may carry synced_gpus unless x is known to be a tokenizer output / data
            # batch: decided by resolve(), once every binding of x is known
            self._kwargs_of.append((len(self.generate),
                                    [k.value for k in node.keywords if k.arg is None]))
            self.generate.append(GenerateCall(self._site(node), val, False))
        elif last == "HfDeepSpeedConfig":
            self.hfds.append(HfDsConfig(self._site(node), id(node) in self._kept))
        elif last == "from_pretrained" and isinstance(node.func, ast.Attribute):
            receiver = dotted(node.func.value)
            if not any(tag in receiver for tag in _NOT_MODELS):
                site = self._site(node)
                self.from_pretrained.append(site)
                if any(k.arg is None for k in node.keywords):
                    self.from_pretrained_splat.append(site)
                if "PeftModel" in receiver:
                    self.uses_peft = True
                self._dtypes_of(site, kw, ("torch_dtype", "dtype"))
        elif last in _TRAINING_ARGS:
            self.training_args.append(self._site(node))
            for key, value in kw.items():
                lit = _literal(value)
                if lit is not _NOT_LITERAL:
                    self.training_arg_values.append((key, lit, getattr(value, "lineno", node.lineno)))
        elif last in _PARSE_METHODS and isinstance(node.func, ast.Attribute) \
                and (dotted(node.func.value) in self._ta_parsers
                     or (isinstance(node.func.value, ast.Call) and _is_ta_parser(node.func.value))):
            # HfArgumentParser((..., TrainingArguments)).parse_*(): TrainingArguments made here
            self.training_args.append(self._site(node))
        elif last in _TRAINER_CLASSES:
            self.trainers.append(self._site(node))
        elif last == "Accelerator":
            self.accelerators.append(self._site(node))
        elif callee == "deepspeed.initialize" or callee.endswith("deepspeed.initialize"):
            self.ds_init.append(self._site(node))
            mpu = kw.get("mpu")
            if mpu is not None and not (isinstance(mpu, ast.Constant) and mpu.value is None):
                self.ds_init_mpu.append(self._site(node))
        elif last in _MERGE_METHODS and isinstance(node.func, ast.Attribute):
            if not self._gathered:
                self.merges.append(self._site(node))
        elif last in ("get_peft_model", "prepare_model_for_kbit_training", "LoraConfig"):
            self.uses_peft = True
        q = kw.get("load_in_4bit")
        if isinstance(q, ast.Constant) and q.value is True and \
                last in ("BitsAndBytesConfig", "from_pretrained"):
            self.quant_4bit.append(self._site(node))
        if last == "BitsAndBytesConfig":
            self._dtypes_of(self._site(node), kw,
                            ("bnb_4bit_quant_storage", "bnb_4bit_compute_dtype"))
        self.generic_visit(node)

    def _dtypes_of(self, site: Site, kw: dict[str, ast.expr], keys: tuple[str, ...]) -> None:
        """The dtypes passed as ``keys``; a name's dtype is read by resolve()."""
        for key in keys:
            if key in kw:
                self._dtype_of.append((len(self.dtypes), kw[key]))
                self.dtypes.append(DtypeUse(site, key, None))

    def _plain_inputs(self, value: ast.AST) -> bool:
        """``**inputs`` bound only to a tokenizer/processor output or a data batch."""
        if isinstance(value, ast.Name):
            return value.id in self.bindings.inputs and value.id not in self.bindings.sync_dicts
        return makes_inputs(value)


_PARSE_METHODS = {"parse_args_into_dataclasses", "parse_json_file", "parse_yaml_file", "parse_dict"}


def _is_ta_parser(call: ast.Call) -> bool:
    """``HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))`` or one class."""
    if dotted(call.func).split(".")[-1] != "HfArgumentParser" or not call.args:
        return False
    first = call.args[0]
    classes = first.elts if isinstance(first, (ast.Tuple, ast.List)) else [first]
    return any(dotted(c).split(".")[-1] in _TRAINING_ARGS for c in classes)


__all__ = ["ScriptFacts", "Site", "GenerateCall", "HfDsConfig", "DtypeUse", "check_script",
           "check_source"]
