"""Real user logs from public issue threads, scanned end to end, judged by their labels.

Two corpora share one ``labels.tsv`` format (file, expected_classes, must_not_classes, source, notes):
- ``../shared/real_logs`` (the project's shared set; env DSDOCTOR_SHARED overrides the location),
- ``tests/data/real_logs_extra`` (more logs collected from DeepSpeed, Transformers, Accelerate,
  TRL, LLaMA-Factory, Megatron, NeMo and PyTorch threads, each with its source).
Every expected kind must be reported and no must-not kind may appear, with both prefilter engines.
A few logs also pin the numbers the formats extract from them.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from dsdoctor.logs.prefilter import available_engines
from dsdoctor.logs.scan import scan_files

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DSDOCTOR_SHARED") or HERE.parents[1] / "shared")
SHARED_LOGS = SHARED / "real_logs"
EXTRA_LOGS = HERE / "data" / "real_logs_extra"
ENGINES = available_engines()


def _rows(root: Path) -> list[dict[str, str]]:
    labels = root / "labels.tsv"
    if not labels.is_file():
        return []
    with labels.open(encoding="utf-8", newline="") as fh:
        return [r for r in csv.DictReader(fh, delimiter="\t") if r.get("file")]


def _kinds(text: str) -> set[str]:
    return {k.strip() for k in (text or "").split(",") if k.strip()}


CASES = [pytest.param(SHARED_LOGS, r, id=f"shared:{r['file']}") for r in _rows(SHARED_LOGS)]
CASES += [pytest.param(EXTRA_LOGS, r, id=f"extra:{r['file']}") for r in _rows(EXTRA_LOGS)]


def test_shared_corpus_present_or_skipped():
    if not SHARED_LOGS.is_dir():
        pytest.skip(f"{SHARED_LOGS} not present (set DSDOCTOR_SHARED to the shared directory)")
    assert len(_rows(SHARED_LOGS)) >= 30


def test_extra_corpus_is_labelled_and_sourced():
    rows = _rows(EXTRA_LOGS)
    assert len(rows) >= 20, "collect at least 20 extra real logs"
    files = {p.name for p in EXTRA_LOGS.glob("*.log")}
    assert files == {r["file"] for r in rows}, "every extra log has exactly one label row"
    for r in rows:
        assert "#" in r["source"] or "/" in r["source"], f"{r['file']}: source must name the thread"
        assert r["notes"].strip(), f"{r['file']}: say what the log shows"
    # The extra set must also hold healthy logs (false positives matter as much as misses).
    assert sum(1 for r in rows if not _kinds(r["expected_classes"])) >= 3


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("root,row", CASES)
def test_real_log_labels(root, row, engine):
    if not root.is_dir():
        pytest.skip(f"{root} not present")
    result = scan_files([str(root / row["file"])], engine=engine)
    got = set(result.symptoms)
    expected = _kinds(row["expected_classes"])
    must_not = _kinds(row["must_not_classes"])
    assert expected <= got, f"{row['file']}: missing {sorted(expected - got)} (got {sorted(got)})"
    assert not (must_not & got), f"{row['file']}: false positives {sorted(must_not & got)}"
    for kind in expected:
        sym = result.symptoms[kind]
        assert sym.evidence and sym.first.line >= 1, f"{row['file']}: {kind} has no evidence line"


# Numbers the formats must extract from particular real logs (value key -> (stat, expected)).
VALUES = [
    ("shared", "batch-size-mismatch__starcoder-rich-traceback-wrapped-assertion.log",
     "batch-size-mismatch", {"train_batch": 64, "micro": 4, "accum": 8, "world": 1}),
    ("shared", "hang__nemo-ptl-progress-bar-glued-nccl-watchdog.log", "hang",
     {"timeout_ms": 1800000, "ran_ms": 25624887, "op": "ALLREDUCE"}),
    ("shared", "hang__ds4781-zero3-checkpoint-watchdog-terminated-frames.log", "hang",
     {"op": "_REDUCE_SCATTER_BASE", "seq": 4210}),
    ("shared", "gpu-oom__ds3869-blockquoted-zero-inference-4gb.log", "gpu-oom",
     {"tried_bytes": 978 * 2**20, "total_bytes": 4 * 2**30, "free_bytes": 0, "gpu": 0}),
    ("shared", "cpu-oom__lmflow-defaultcpuallocator-cant-allocate.log", "cpu-oom",
     {"tried_bytes": 4009910272}),
    ("shared", "op-build-failure__dolly-cuda-9.1-vs-11.8-trainer.log", "op-build-failure",
     {"cuda_installed": "9.1", "cuda_torch": "11.8"}),
    ("shared", "op-build-failure__gptneo-jupyter-traceback-cpu-adam.log", "op-build-failure",
     {"op": "cpu_adam"}),
    ("shared", "config-mismatch__medicalgpt-fp16-enabled-vs-hf.log", "config-mismatch",
     {"ds_key": "fp16.enabled", "ds_value": "True"}),
    ("shared", "fp16-overflow__ds386-2020-stage2-float-scale.log", "fp16-overflow",
     {"attempted_scale": 4294967296, "next_scale": 16777216}),
    ("shared", "cpu-oom__ds3232-dschat-opt125m-return-code-9.log", "cpu-oom", {"exit_code": -9}),
    ("extra", "shm-exhausted__nccltests166-failed-to-extend-dev-shm.log", "shm-exhausted",
     {"wanted_bytes": 5967876, "segment": "/dev/shm/nccl-fjwOOB"}),
    ("extra", "nccl-error__nccl1410-distbackenderror-unhandled-cuda-error.log", "nccl-error",
     {"reason": "unhandled cuda error", "nccl_version": "2.20.5",
      "nccl_result": "ncclUnhandledCudaError"}),
    ("extra", "nccl-error__nccl1405-ib-completion-status-12-proxy.log", "nccl-error",
     {"ib_status": 12}),
    ("extra", "checkpoint-error__glm136-zero-dp-world-size-256-vs-2.log", "checkpoint-error",
     {"ckpt_world": 256, "world": 2}),
    ("extra", "checkpoint-error__lightning18648-zero3-size-mismatch-empty-shape.log",
     "checkpoint-error", {"model_shape": "0", "ckpt_shape": "768, 768"}),
    ("extra", "cuda-error__trl1995-index-select-assert-glued-to-progress.log", "cuda-error",
     {"assertion": "srcIndex < srcSelectDimSize", "kernel": "indexSelectLargeIndex"}),
    ("extra", "cuda-error__fooocus1313-nvidia-driver-too-old.log", "cuda-error",
     {"driver_cuda": 11040}),
    ("extra", "job-time-limit__zetta671-job-and-step-cancelled.log", "job-time-limit",
     {"job_id": "494583", "reason": "TIME LIMIT"}),
    ("extra", "disk-full__llamafactory1223-streamwriter-after-checkpoint-save.log", "disk-full",
     {"record": "data/176"}),
    ("extra", "gpu-oom__vllm-ascend1127-npu-oom-ray-worker-prefix.log", "gpu-oom",
     {"device": "NPU", "gpu": 3, "tried_bytes": 30 * 2**20}),
    ("extra", "gpu-oom__pytorch152351-mps-backend-oom-trainer-backward.log", "gpu-oom",
     {"total_bytes": int(18.13 * 2**30)}),
]


def _value(sym, key):
    v = sym.values.get(key)
    if isinstance(v, dict):  # numeric: first/last/min/max -> compare against first or extremes
        return {v.get("first"), v.get("last"), v.get("min"), v.get("max")}
    if isinstance(v, list):
        return set(v)
    return {v}


@pytest.mark.parametrize("corpus,name,kind,values", VALUES, ids=[v[1] for v in VALUES])
def test_extracted_values_from_real_logs(corpus, name, kind, values):
    root = SHARED_LOGS if corpus == "shared" else EXTRA_LOGS
    path = root / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    sym = scan_files([str(path)]).symptoms[kind]
    for key, want in values.items():
        assert want in _value(sym, key), f"{name}: {kind}.{key} = {sym.values.get(key)!r}, want {want!r}"


def test_timeline_from_real_logs():
    """Step lines, Trainer dicts, Megatron iterations, nanoGPT and bars feed the timeline."""
    cases = {
        "negative__megatron-llm-healthy-iterations-loss-scale-1.log": ("loss_scale", 1.0),
        "negative__ds2302-see-memory-usage-step-2500-finished.log": ("step", 2500),
        "negative__ms-swift-qwen3-sft-step-dicts.log": ("grad_norm", 4.11375999),
        "nan-loss__nanogpt-fp16-iter-loss-nan-blockquoted.log": ("step", 3060),
    }
    if not SHARED_LOGS.is_dir():
        pytest.skip(f"{SHARED_LOGS} not present")
    for name, (field, want) in cases.items():
        points = scan_files([str(SHARED_LOGS / name)]).timeline
        assert points, f"{name}: no timeline"
        seen = {getattr(p, field) for p in points}
        assert any(v is not None and abs(v - want) < 1e-9 for v in seen), f"{name}: {field} {seen}"


@pytest.mark.skipif(len(ENGINES) < 2, reason="hyperscan not installed: one engine only")
@pytest.mark.parametrize("root,row", CASES)
def test_both_engines_agree_on_real_logs(root, row):
    """The Hyperscan and pure-Python prefilters must lead to the very same symptoms."""
    if not root.is_dir():
        pytest.skip(f"{root} not present")
    path = str(root / row["file"])
    a, b = (scan_files([path], engine=e) for e in ("hyperscan", "python"))
    summary = [{k: (s.count, s.first.line, s.last.line, s.patterns) for k, s in r.symptoms.items()}
               for r in (a, b)]
    assert summary[0] == summary[1]
    assert [(p.line, p.source) for p in a.timeline] == [(p.line, p.source) for p in b.timeline]
