#!/usr/bin/env python3
"""Regenerate the per-format sections of docs/formats.md from dsdoctor/logs/formats/*.yaml.

Keeps the hand-written introduction (before "## Symptom kinds ...") and the "## Known gaps"
section, and rewrites everything between them. Run from the repository root:

    python scripts/gen_format_docs.py
"""
import glob
import os
from collections import defaultdict

import yaml

from dsdoctor.model import SYMPTOM_KINDS

head = open('docs/formats.md').read().split('## Symptom kinds and the patterns that emit them')[0]
tail = '## Known gaps' + open('docs/formats.md').read().split('## Known gaps')[1]
out = [head, """## Symptom kinds and the patterns that emit them

A symptom is a fact, not a verdict: a few overflows at the start of fp16 training are normal, and
the rules decide. Where one line proves two things (DeepSpeed's "Attempted loss scale: 1, reducing
to 1" is both an overflow and a collapsed scale) two patterns fire.

"""]
files = [f for f in sorted(glob.glob('dsdoctor/logs/formats/*.yaml')) if not f.endswith('facts.yaml')]
bykind = defaultdict(list)
for f in files:
    for p in yaml.safe_load(open(f))['patterns']:
        bykind[p['emits']].append(p['id'])
out.append("| kind | patterns |\n| --- | --- |\n")
for k in list(SYMPTOM_KINDS) + ['timeline'] + sorted(x for x in bykind if x.startswith('fact:')):
    out.append(f"| `{k}` | {', '.join('`%s`' % i for i in bykind.get(k, []))} |\n")
out.append("\n")
for f in files:
    d = yaml.safe_load(open(f))
    header = []
    for line in open(f):
        if line.startswith('#'): header.append(line[1:].rstrip())
        else: break
    out.append(f"## `{d['format']}` ({os.path.basename(f)})\n\n{d['description']}.\n\n")
    if header:
        out.append("What prints it:\n\n```\n" + "\n".join(h[1:] if h.startswith(' ') else h for h in header) + "\n```\n\n")
    out.append("| pattern | emits | strength | fields | sample sources |\n| --- | --- | --- | --- | --- |\n")
    for p in d['patterns']:
        fields = ", ".join(f"{k} ({v})" for k, v in (p.get('fields') or {}).items()) or "-"
        srcs = "; ".join(dict.fromkeys(s.get('source','') for s in p['samples'])).replace('|', '\\|')
        out.append(f"| `{p['id']}` | `{p['emits']}` | {p.get('strength',1)} | {fields} | {srcs} |\n")
    out.append("\n")
out.append(tail)
open('docs/formats.md','w').write("".join(out))
