"""Has the project used this thread already? A collector's first check, before the seal and before
reading the thread: a thread cited anywhere in the repository (a pattern's or rule's source, a
sample, a wild or sealed log's label, a collector's audit trail) cannot join a new held-out set,
because someone here has read it.

    python bench/address_used.py https://github.com/owner/repo/issues/123 ...   # prints: used | new

Only the answer is printed, never where the address was found: the sealed folders' labels are
searched too, and saying which sealed log cites a thread would unseal it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from seal import canonical

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "real_logs"
SUFFIXES = {".yaml", ".yml", ".tsv", ".txt", ".md", ".py", ".json", ".log"}


#: Repositories that moved: a thread is the same thread under either owner.
MOVED = {"microsoft/deepspeed": "deepspeedai/deepspeed", "volcengine/verl": "verl-project/verl",
         "hiyouga/llama-factory": "hiyouga/llamafactory", "modelscope/swift": "modelscope/ms-swift"}


def _short_forms(address: str) -> list[str]:
    """The address and the `owner/repo#N` form patterns cite (GitHub issues and pull requests),
    under each name its repository had."""
    url = canonical(address)
    forms = [url.removeprefix("https://").removeprefix("http://")]
    m = re.match(r"https?://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)$", url)
    if m:
        repo, number = m.group(1), m.group(2)
        names = {repo} | {a for a, b in MOVED.items() if b == repo} | {MOVED.get(repo, repo)}
        for name in sorted(names):
            forms += [f"{name}#{number}", f"github.com/{name}/issues/{number}",
                      f"github.com/{name}/pull/{number}"]
    return forms


def _corpus() -> str:
    texts: list[str] = []
    for base in (ROOT, SHARED):
        if not base.is_dir():
            continue
        for path in base.rglob("*"):
            if ".git" in path.parts or ".venv" in path.parts or path.suffix not in SUFFIXES:
                continue
            if path.suffix == ".log" and "real_logs_sealed" in str(path):
                continue  # the sealed logs' own text is never searched; their labels are
            try:
                texts.append(path.read_text(encoding="utf-8", errors="replace").lower())
            except OSError:
                continue
    return "\n".join(texts)


def is_used(address: str, corpus: str) -> bool:
    # `owner/repo#12` must not match `owner/repo#123`
    return any(re.search(re.escape(form) + r"(?![0-9])", corpus) for form in _short_forms(address))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python bench/address_used.py URL...", file=sys.stderr)
        sys.exit(2)
    text = _corpus()
    for src in sys.argv[1:]:
        print("used" if is_used(src, text) else "new", src)
