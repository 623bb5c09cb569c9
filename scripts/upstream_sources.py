#!/usr/bin/env python3
"""Unpack released upstream sources where tests/test_rules_verified.py re-checks citations.

    python scripts/upstream_sources.py [DEST]      # DEST defaults to $DSDOCTOR_UPSTREAM_MIRRORS or /work/.mirror

A rule's ``verified`` entry cites ``owner/repo@TAG:path:LINE``. Git snapshots of some repositories
are too big to bring here (transformers, pytorch); the released wheel or sdist holds the same files
with the same lines, so each release is unpacked under ``DEST/<owner>+<repo>/tags/<TAG>/`` in the
repository's own layout (``src/transformers/...``). Downloads come from the package index with pip;
nothing is imported or run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

#: (pip requirement, owner/repo, tag, folder the package's files have in the repository)
RELEASES = [
    ("transformers==4.27.4", "huggingface/transformers", "v4.27.4", "src/"),
    ("transformers==4.28.0", "huggingface/transformers", "v4.28.0", "src/"),
    ("transformers==4.44.2", "huggingface/transformers", "v4.44.2", "src/"),
    ("transformers==4.46.1", "huggingface/transformers", "v4.46.1", "src/"),
    ("transformers==4.46.2", "huggingface/transformers", "v4.46.2", "src/"),
    ("transformers==4.46.3", "huggingface/transformers", "v4.46.3", "src/"),
    ("transformers==4.47.0", "huggingface/transformers", "v4.47.0", "src/"),
    ("transformers==4.47.1", "huggingface/transformers", "v4.47.1", "src/"),
    ("transformers==4.57.6", "huggingface/transformers", "v4.57.6", "src/"),
    ("transformers==5.23.0", "huggingface/transformers", "v5.23.0", "src/"),
    ("accelerate==1.15.0", "huggingface/accelerate", "v1.15.0", "src/"),
    ("peft==0.21.2", "huggingface/peft", "v0.21.2", "src/"),
    ("deepspeed==0.19.6", "deepspeedai/DeepSpeed", "v0.19.6", ""),
    ("deepspeed==0.19.7", "deepspeedai/DeepSpeed", "v0.19.7", ""),
    ("deepspeed==0.19.8", "deepspeedai/DeepSpeed", "v0.19.8", ""),
    # a wheel (its sdist needs a CUDA build to describe itself): vllm/ as in the repository
    ("vllm==0.6.4", "vllm-project/vllm", "v0.6.4", ""),
]


def unpack(archive: Path, dest: Path, prefix: str) -> None:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if ".dist-info/" in name or name.endswith("/"):
                    continue
                target = dest / prefix / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
    else:  # an sdist: its top folder is the repository's root
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                if not member.isfile():
                    continue
                rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                fh = tf.extractfile(member)
                if fh is not None:
                    target.write_bytes(fh.read())


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else
                os.environ.get("DSDOCTOR_UPSTREAM_MIRRORS", "/work/.mirror"))
    for req, repo, tag, prefix in RELEASES:
        dest = root / repo.replace("/", "+") / "tags" / tag
        if dest.is_dir():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                            ":none:", "-d", tmp, req], check=True)
            (archive,) = Path(tmp).iterdir()
            unpack(archive, dest, prefix)
        print(f"{repo}@{tag} -> {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
