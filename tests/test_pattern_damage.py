"""Every real sample line of every symptom pattern, damaged the way real pastes damage lines.

Issue 19, item 5: a pattern is keyed on the meaning of a line, not on the exact way one terminal
showed it. For each sample line of each pattern that emits a symptom kind (or a ``fact:*``
outside facts.yaml), this test generates the damage seen in real pastes and scans the damaged
text through the real scan path (reader.open_log with its paste repair, both prefilter engines,
reader.normalize, the precise regexes: ``Scanner.scan_path``), and asserts the same symptom kind
is still reported on the damaged line (by any pattern: a cut line may be found by a sibling).

The damage (``VARIANTS``):
- ``cut-end``: the line cut right after its core. The core of a sample is the span from the
  start of its prefilter match (or of an earlier field the sample declares a value for) to the
  end of that match (or of a later declared field): what the pattern needs to say what it says.
- ``cut-start``: the line cut in the middle of what precedes the core (a cut logger prefix);
  ``no-prefix``: everything before the core removed; ``core-only``: cut at both ends.
- ``indent-spaces``, ``indent-tab``: indentation added; ``dedent``: leading whitespace removed.
- ``wrap80``: the line hard-wrapped at 80 columns, in a paste where another long real line is
  wrapped too (a terminal wraps every line; paste.py joins them back).
- ``bar-cr``, ``bar-glued``: a tqdm bar before the line, with and without the ``\\r`` tqdm writes.
- ``quote``, ``quote-nested``: inside a markdown blockquote (``> ``, ``> > ``).
- ``rank-*``: each launcher's prefix (torch, torchrun --tee, srun --label, mpirun
  --tag-output, pdsh, Ray).

A variant that cannot be found is listed in ``EXEMPT`` with the reason; the test checks that an
exempt variant is indeed still missed, so the list never keeps a stale entry.

Speed: one file per pattern holds all its variants (blank lines between them, a line map says
which variant is where), scanned once per engine; a file that the paste repair rewrote (its line
numbers no longer map) is scanned again one variant per file. Wrapped variants get one file each
(a hard wrap is recognized from the whole paste).
"""

from __future__ import annotations

import functools
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsdoctor.logs.formats import DUPLICATE_MARK, MAX_JOIN_NEXT, Pattern, load_patterns
from dsdoctor.logs.prefilter import available_engines
from dsdoctor.logs.reader import normalize
from dsdoctor.logs.scan import Scanner

PATTERNS = tuple(p for p in load_patterns()
                 if p.format != "facts" and not p.is_timeline)
ENGINES = tuple(available_engines())

# tqdm's default bar (format "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]")
BAR = "  5%|▌         | 10/200 [00:10<03:10,  1.00it/s]"
RANK_PREFIXES = {
    "rank-torch": "[rank3]: ",  # torch >= 2.2
    "rank-torchrun": "[default3]:",  # torchrun --tee 3
    "rank-srun": "3: ",  # srun --label, deepspeed multi-node
    "rank-mpirun": "[1,3]<stderr>:",  # mpirun --tag-output
    "rank-pdsh": "node-1: ",  # pdsh / deepspeed's pdsh runner
    "rank-ray": "(WorkerDict pid=123, ip=10.0.0.1) ",  # Ray's log collector
}
# A real long line of a healthy run (sample_logs/checkpoint_disk_full/train.log, line 2: DeepSpeed
# 0.19.8's runner): the other wrapped line of a paste hard-wrapped at 80 columns.
WRAP_COMPANION = ("[2026-11-24 18:00:21,193] [WARNING] [runner.py:214:fetch_hostfile] Unable to find "
                  "hostfile, will proceed with training with local resources only.")
WRAP_WIDTH = 80
VARIANTS = ("cut-end", "cut-start", "no-prefix", "core-only", "indent-spaces", "indent-tab",
            "dedent", "wrap80", "bar-cr", "bar-glued", "quote", "quote-nested",
            *RANK_PREFIXES)

# (pattern id, variant) -> why that damage cannot leave the line recognizable.
EXEMPT: dict[tuple[str, str], str] = {
    ("ray-tune-checkpoint-handling", "no-prefix"): (
        "without Ray's 'Trial ' the line is any program's 'X: Error handling checkpoint', which "
        "other tools print for their own checkpoints (the pattern's negatives)"),
    ("hf-ds-mismatch-item", "bar-glued"): (
        "an item line of the Trainer's mismatch list ('- ds X=.. vs hf Y=..') is inside a "
        "ValueError message, never the first print after a bar; glued mid-line, '- ds' is prose"),
    ("fact-srun-mpirun-typed-cmd", "bar-glued"): (
        "a command typed at a shell prompt never follows a progress bar on its line; mid-line, "
        "'srun -' or 'mpirun -' is a message that quotes a command, not one that ran"),
    ("fact-srun-mpirun-typed-cmd", "cut-start"): (
        "a typed command is known by the shell prompt before it; a half-cut prompt ('st02 bin]$ "
        "mpirun -np 4') is not one, and without it 'mpirun -np' is a quoted command"),
    ("enospc", "no-prefix"): (
        "'No space left on device' alone is also /dev/shm's (torch's shm files, joblib's warning: "
        "shm-exhausted, a healthy run's warning); the OSError [Errno 28] makes it a disk write"),
    ("traceback-frame", "cut-end"): (
        "a frame cut right after 'File \"' names no file and no line: any quoted path starts so"),
    ("traceback-frame", "core-only"): (
        "a frame cut to its prefilter ('File \"') names no file and no line"),
    ("rich-traceback-frame", "core-only"): (
        "a rich frame cut to its box and first word ('│ in ') names no file: any rich panel row"),
    ("rich-traceback-frame", "cut-end"): (
        "a rich frame cut right after its box and first character ('│ /') names no file: any rich "
        "panel or table row starts that way"),
    ("checkpoint-load-path", "no-prefix"): (
        "'loading checkpoint: /path' without DeepSpeed's 'rank: N' before it is too common a "
        "phrase (any script's) to take its path as the run's checkpoint (a fact for the rules)"),
}


# Patterns whose prefilter (plus the fields a sample declares) is not the whole of what the line
# says: their core, as a regex on the normalized line ("match": the precise regex's own match).
# A sample it does not match keeps the default core.
CORE: dict[str, str] = {
    # "gradient accumulation steps to 1 from 16" alone could be any scheduler's message
    "accelerate-grad-accum-updated": r"DeepSpeed's gradient accumulation steps to \d+ from \d+",
    # the hang is the store's error at the end, not the communicator set-up it interrupted
    "nccl-uniqueid-store-timeout": (r"is setting up NCCL communicator.*got error: "
                                    r"(?:Socket Timeout|Timeout waiting for key)"),
    # "1, reducing to 1" says nothing without "Attempted loss scale"
    "ds-scale-reduced-to-one": r"Attempted\s+loss\s+scal\s*e:\s*[\d.e-]+,\s*reducing\s+to\s+[\d.e-]*\d",
    # bash's job report: "N Killed" needs its "line N:" to be one
    "shell-killed": r":\s*line \d+:\s+\d+\s+Killed",
    # "Unable to allocate 72.8 TiB" is any allocator's; "for an array" is NumPy's
    "numpy-array-memory": r"Unable to allocate \S+ ?\S* for an array",
    # the signal is the meaning (a wrapped sample declares only the rank)
    "mpirun-rank-sigkill": r"noticed that process rank \d+ .*?exited on\s+signal 9",
    # "NCCL WARN socketProgress" or "Cuda failure 'x" alone names no failure
    "nccl-warn-failure": "match",
    # the command decides which pattern owns the exit (ninja builds, ssh checks, any command)
    "subprocess-killed-sigkill": r"Command '.*?' died with <Signals\.\w+: \d+>",
    "subprocess-nonzero-exit": r"Command '.*?' (?:returned non-zero exit status \d+|died with <Signals\.\w+: \d+>)",
    "cpp-ext-ninja-failed": r"Command '\['ninja'.*?exit status \d+",
    "ds-runner-ssh-check-failed": "match",
    # "THCudaCheck FAIL file=" is any CUDA error; "error=2 : out of memory" is the OOM
    "thc-cuda-check-oom": "match",
    # a torch_extensions path is no failure; "cannot open shared object file" is
    "cpp-ext-so-missing": "match",
    # "EI0006:" is an Ascend error code; the timeout is the text after it
    "hccl-timeout": "match",
    # "] Assertion `x` failed." is any C assert; the block and thread make it the device's
    "cuda-device-assert": r"block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `[^`]*`?",
}


@dataclass(frozen=True)
class Core:
    """Where a sample's normalized first line keeps what its pattern needs (char offsets)."""

    text: str
    start: int
    end: int


def _char_offset(text: str, byte_offset: int) -> int:
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def core_of(pattern: Pattern, sample: dict) -> Core | None:
    """The core of a sample's first physical line (None when the prefilter or the regex cannot
    locate it on the normalized line: a sample needing its next lines)."""
    text = normalize(sample["line"].split("\n")[0].encode("utf-8")).text
    flags = re.IGNORECASE if pattern.caseless else 0
    pm = re.search(pattern.prefilter.encode("utf-8"), text.encode("utf-8"), flags)
    rm = pattern.regex.search(text)
    if pm is None or rm is None:
        return None
    start, end = _char_offset(text, pm.start()), _char_offset(text, pm.end())
    override = CORE.get(pattern.id)
    cm = rm if override == "match" else re.search(override, text) if override else None
    if cm is not None:
        return Core(text, cm.start(), cm.end())
    wanted = set(sample.get("values") or ())
    for name, num in pattern.regex.groupindex.items():
        if name.split(DUPLICATE_MARK)[0] in wanted and rm.start(num) != -1:
            start, end = min(start, rm.start(num)), max(end, rm.end(num))
    return Core(text, start, end)


def variants_of(pattern: Pattern, sample: dict) -> dict[str, list[str]]:
    """Every damaged form of one sample (its physical lines), by variant name; a variant that
    would not change the sample is left out."""
    lines = sample["line"].split("\n")
    first, rest = lines[0], lines[1:]
    out: dict[str, list[str]] = {}
    core = core_of(pattern, sample)
    if core is not None and not rest:  # a hard-wrapped sample's core may span its lines
        t, s, e = core.text, core.start, core.end
        if e < len(t.rstrip()):
            out["cut-end"] = [t[:e]]
        if s > 1:
            out["cut-start"] = [t[s // 2:]]
        if s > 0:
            out["no-prefix"] = [t[s:]]
        if s > 0 and e < len(t.rstrip()):
            out["core-only"] = [t[s:e]]
    out["indent-spaces"] = ["    " + ln for ln in lines]
    out["indent-tab"] = ["\t" + ln for ln in lines]
    if any(ln != ln.lstrip() for ln in lines):
        out["dedent"] = [ln.lstrip() for ln in lines]
    if any(len(ln) > WRAP_WIDTH for ln in lines):
        out["wrap80"] = [piece for ln in lines for piece in _hard_wrap(ln)]
    # the bar goes after the paste's own quote markers (markdown is outermost)
    q = re.match(r"[ \t]*(?:>[ \t]?)*", first).end()
    out["bar-cr"] = [first[:q] + BAR + "\r" + first[q:], *rest]
    out["bar-glued"] = [first[:q] + BAR + first[q:], *rest]
    out["quote"] = ["> " + ln for ln in lines]
    out["quote-nested"] = ["> > " + ln for ln in lines]
    for name, prefix in RANK_PREFIXES.items():
        out[name] = [prefix + ln for ln in lines]
    return out


def _hard_wrap(line: str) -> list[str]:
    return [line[i:i + WRAP_WIDTH] for i in range(0, len(line), WRAP_WIDTH)] or [line]


# Blank lines between variants: a pattern joining the next lines (join_next) never reaches the
# next variant.
SEPARATOR = [""] * MAX_JOIN_NEXT


def _write(path: Path, blocks: list[list[str]]) -> list[tuple[int, int]]:
    """Write blocks of lines separated by blank lines; their (first, last) line numbers."""
    lines: list[str] = []
    spans = []
    for block in blocks:
        spans.append((len(lines) + 1, len(lines) + len(block)))
        lines += block + SEPARATOR
    path.write_bytes("\n".join(lines).encode("utf-8"))
    return spans


class _Recorder:
    """The kinds each scanned (file, line) reported, through one Scanner per engine."""

    def __init__(self, engine: str):
        self.scanner = Scanner(engine=engine, jobs=1)
        self.scanner.events_of_conditional_patterns = True  # what each line says, vetoes aside
        self.events: dict[str, dict[int, set[str]]] = {}

    def scan(self, path: Path) -> tuple[dict[int, set[str]], bool]:
        """(kinds by line, whether the paste repair rewrote the file)."""
        name = str(path)
        by_line = self.events.setdefault(name, {})
        notes = len(self.scanner.notes)
        self.scanner.scan_path(name, on_event=lambda kind, ev, _v: by_line.setdefault(
            ev.line, set()).add(kind))
        repaired = any("refer to the repaired text" in n for n in self.scanner.notes[notes:])
        return by_line, repaired


Key = tuple[str, int, str]  # (pattern id, sample index, variant)


@functools.cache
def scanned(engine: str) -> dict[Key, bool]:
    """Whether each damaged sample was found as its pattern's kind, scanned with ``engine``."""
    rec = _Recorder(engine)
    found: dict[Key, bool] = {}
    with tempfile.TemporaryDirectory(prefix="dsdoctor-damage-") as tmp:
        root = Path(tmp)
        for n, p in enumerate(PATTERNS):
            keyed: list[tuple[Key, list[str]]] = []
            for i, s in enumerate(p.samples):
                for variant, lines in variants_of(p, s).items():
                    if variant == "wrap80":
                        path = root / f"p{n}-s{i}-wrap.log"
                        _write(path, [_hard_wrap(WRAP_COMPANION), lines])
                        by_line, _ = rec.scan(path)
                        found[(p.id, i, variant)] = any(p.emits in k for k in by_line.values())
                    else:
                        keyed.append(((p.id, i, variant), lines))
            path = root / f"p{n}.log"
            spans = _write(path, [lines for _, lines in keyed])
            by_line, repaired = rec.scan(path)
            for j, (key, lines) in enumerate(keyed):
                if repaired:  # line numbers moved: this variant alone, in a file of its own
                    one = root / f"p{n}-v{j}.log"
                    _write(one, [lines])
                    by_one, _ = rec.scan(one)
                    found[key] = any(p.emits in k for k in by_one.values())
                else:
                    lo, hi = spans[j]
                    found[key] = any(p.emits in by_line.get(ln, ()) for ln in range(lo, hi + 1))
    return found


def _cases() -> list[tuple[Pattern, str]]:
    cases = []
    for p in PATTERNS:
        have = {v for s in p.samples for v in variants_of(p, s)}
        cases += [(p, v) for v in VARIANTS if v in have]
    return cases


CASES = _cases()


@pytest.mark.parametrize("pattern,variant", CASES, ids=[f"{p.id}:{v}" for p, v in CASES])
def test_damaged_sample_is_still_found(pattern, variant):
    for engine in ENGINES:
        results = scanned(engine)
        missed = [(i, variants_of(pattern, s)[variant]) for i, s in enumerate(pattern.samples)
                  if (pattern.id, i, variant) in results and not results[(pattern.id, i, variant)]]
        reason = EXEMPT.get((pattern.id, variant))
        if reason:
            assert missed, (f"{pattern.id} {variant} ({engine}) is found now: remove its "
                            f"exemption ({reason})")
            continue
        assert not missed, (f"{pattern.id} ({engine}): {variant} not found as {pattern.emits}: "
                            + "; ".join(f"sample {i}: {lines!r}"[:300] for i, lines in missed))


def test_every_exemption_names_a_case_and_a_reason():
    names = {(p.id, v) for p, v in CASES}
    for key, reason in EXEMPT.items():
        assert key in names, f"exemption {key} names no generated case"
        assert len(reason) > 20, f"exemption {key} needs its reason"


# ---- the shared repairs the damage above needed ------------------------------------------------

def _batch_sample() -> list[str]:
    # bigcode-project/starcoder#77: a rich traceback's message, hard-wrapped (ds-batch-assertion)
    p = next(p for p in PATTERNS if p.id == "ds-batch-assertion")
    return next(s["line"] for s in p.samples if "\n" in s["line"]).split("\n")


@pytest.mark.parametrize("prefix", ["", "> ", "> > ", "3: ", "[rank3]: "])
def test_wrapped_message_with_a_prefix_on_every_line_is_joined_without_the_copies(prefix):
    from dsdoctor.logs import paste

    lines = [prefix + ln for ln in _batch_sample()]
    width = paste.wrap_width(lines)
    assert width == len(lines[0])
    text, repairs = paste.repair_text("\n".join(lines), width)
    assert len(repairs) == 1 and repairs[0].joined == 3
    # one prefix, at the start; the word wrap's lost space stays lost
    assert text == prefix + "".join(_batch_sample())


@pytest.mark.parametrize("raw,text,rank", [
    (b"    [rank0]: Traceback (most recent call last):", "Traceback (most recent call last):", 0),
    (b"\t[default3]:RuntimeError: x", "RuntimeError: x", 3),
    (b"      > Traceback (most recent call last):", "Traceback (most recent call last):", None),
    # indented "3: " and "node-1: " are list items and key-value lines, not srun or pdsh prefixes
    (b"    3: loss scale reduced", "    3: loss scale reduced", None),
    (b"  gpu0: Tesla V100", "  gpu0: Tesla V100", None),
])
def test_normalize_peels_indentation_before_a_launcher_prefix_or_quote(raw, text, rank):
    seg = normalize(raw)
    assert (seg.text, seg.rank) == (text, rank)
