"""Flight Recorder dumps: the plain-only pickle loader, the dump reader, cross-rank matching, CLI.

The dumps are built in the format torch 2.13's FlightRecorder writes (keys from
torch/csrc/distributed/c10d/FlightRecorder.hpp; values as a real gloo dump of this machine holds
them: sample_logs/hang_desync_fr_trace/fr_trace). Hostile pickles are built with pickle opcodes
by hand: none of them may run, import or build anything.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose import frmatch
from dsdoctor.logs import frdump
from dsdoctor.logs.plainpickle import RefusedPickle, loads_plain

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "hang_desync_fr_trace"


def entry(seq: int, op: str = "all_reduce", sizes: list | None = None, record: int | None = None,
          frames: list | None = None, pg: tuple[str, str] = ("0", "default_pg")) -> dict:
    sizes = sizes if sizes is not None else [[4]]
    return {"record_id": seq - 1 if record is None else record, "pg_id": 0,
            "process_group": list(pg), "collective_seq_id": seq, "p2p_seq_id": 0,
            "is_p2p": False, "op_id": seq, "profiling_name": f"gloo:{op}",
            "time_created_ns": 1000 + seq, "input_sizes": sizes, "input_dtypes": ["Float"],
            "output_sizes": sizes, "output_dtypes": ["Float"], "state": "scheduled",
            "retired": True, "timeout_ms": 5000, "frames": frames or []}


def dump(entries: list[dict], ranks: str = "[0, 1]", name: str = "") -> dict:
    # gloo writes its default group's pg_config under "" (a real dump of torch 2.13.0 does)
    return {"version": "2.10", "pg_config": {name: {"name": name, "desc": "", "ranks": ranks}},
            "comm_lib_version": "", "pg_status": {"0": {"last_enqueued_collective": "5",
                                                        "last_started_collective": "-1",
                                                        "last_completed_collective": "4"}},
            "entries": entries}


def frame(fn: str, file: str, line: int) -> dict:
    return {"name": fn, "filename": file, "line": line}


LIB = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def write(tmp_path: Path, per_rank: dict[int, dict], fmt: str = "pickle") -> Path:
    d = tmp_path / "fr"
    d.mkdir(parents=True, exist_ok=True)
    for r, content in per_rank.items():
        p = d / f"nccl_trace_rank_{r}"
        if fmt == "pickle":
            p.write_bytes(pickle.dumps(content, protocol=2))
        else:
            p.write_text(json.dumps(content))
    return d


# ----------------------------------------------------------------------------- hostile pickles

SYSTEM = b"cos\nsystem\n(S'touch /tmp/frtrace-pwned'\ntR."  # protocol 0: os.system(...)


def _class_ref() -> bytes:
    # protocol 2, STACK_GLOBAL-free: GLOBAL collections OrderedDict, then EMPTY_TUPLE NEWOBJ
    return b"\x80\x02ccollections\nOrderedDict\nq\x00)\x81q\x01."


def _deep(n: int) -> bytes:
    # n nested lists built bottom-up through the memo: constant stack, unbounded depth
    out = bytearray(b"\x80\x02]q\x00")
    for i in range(1, n):
        out += b"]" + b"h" + bytes([(i - 1) % 256]) + b"a" + b"q" + bytes([i % 256])
    return bytes(out + b".")


def _laughs(levels: int) -> bytes:
    # each level a list holding the previous one twice: 2**levels leaves from a few hundred bytes
    out = bytearray(b"\x80\x02X\x03\x00\x00\x00lolq\x00")
    for i in range(1, levels + 1):
        out += b"]h" + bytes([i - 1]) + b"ah" + bytes([i - 1]) + b"aq" + bytes([i])
    return bytes(out + b".")


def test_plain_pickle_of_a_dump_is_read() -> None:
    d = dump([entry(1)])
    assert loads_plain(pickle.dumps(d, protocol=2)) == d


@pytest.mark.parametrize(("data", "said"), [
    (SYSTEM, "opcode GLOBAL (os system) at byte 0 names a global"),
    (_class_ref(), "opcode GLOBAL (collections OrderedDict) at byte 2 names a global"),
    (b"\x80\x02)]R.", "opcode REDUCE at byte 4 calls a callable"),
    (b"\x80\x02P0\n.", "PERSID"),
    (_deep(200), "nests containers deeper than 32 levels"),
    (_laughs(30), "decompression bomb"),
    (b"\x80\x02]q\x00h\x00a.", "contains itself"),
    (b"\x80\x02X\xff\xff\xff\x7fabc.", "not a valid pickle"),
])
def test_hostile_pickles_are_refused_without_running(data: bytes, said: str) -> None:
    marker = Path("/tmp/frtrace-pwned")
    marker.unlink(missing_ok=True)
    with pytest.raises(RefusedPickle) as exc:
        loads_plain(data)
    assert said in str(exc.value)
    assert "\n" not in str(exc.value)
    assert not marker.exists()


def test_refusing_unpickler_layer_refuses_globals_by_itself() -> None:
    # layer 2 alone (the opcode check skipped): find_class refuses, nothing is imported
    import io

    from dsdoctor.logs import plainpickle

    with pytest.raises(RefusedPickle, match="global os.system"):
        plainpickle._NoClassUnpickler(io.BytesIO(SYSTEM)).load()


def test_huge_pickle_is_refused_before_reading(tmp_path: Path, capsys) -> None:
    d = tmp_path / "fr"
    d.mkdir()
    big = d / "nccl_trace_rank_0"
    with open(big, "wb") as fh:  # sparse: 65 MiB on disk costs nothing
        fh.write(b"\x80\x02}q\x00(X\x07\x00\x00\x00versionpg_configentries")
        fh.truncate(65 * 2**20)
    code = main(["analyze", "--trace", str(big)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "larger than" in err


@pytest.mark.parametrize("data", [SYSTEM, _class_ref(), _deep(200), _laughs(30)],
                         ids=["os-system", "class-ref", "deep", "laughs"])
def test_cli_hostile_dump_is_one_line_and_exit_2(tmp_path: Path, capsys, data: bytes) -> None:
    marker = Path("/tmp/frtrace-pwned")
    marker.unlink(missing_ok=True)
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(data)
    code = main(["analyze", "--trace", str(p)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "refused" in err and "Traceback" not in err
    assert not marker.exists()


# ----------------------------------------------------------------------------- reading, matching

def test_json_and_pickle_dumps_read_alike(tmp_path: Path) -> None:
    per = {0: dump([entry(1), entry(2)]), 1: dump([entry(1), entry(2)])}
    a = frdump.read_dumps([str(write(tmp_path / "a", per, "pickle"))])
    b = frdump.read_dumps([str(write(tmp_path / "b", per, "json"))])
    assert [d.entries for d in a] == [d.entries for d in b]
    assert a[0].groups[""].ranks == (0, 1) and a[1].last_enqueued == {"0": 5}


def test_missing_rank_is_the_culprit(tmp_path: Path) -> None:
    per = {0: dump([entry(1), entry(2), entry(3, sizes=[[8]])]),
           1: dump([entry(1), entry(2)]), 2: dump([entry(1), entry(2), entry(3, sizes=[[8]])])}
    per = {r: {**d, "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1, 2]"}}}
           for r, d in per.items()}
    t = frmatch.analyze(frdump.read_dumps([str(write(tmp_path, per))]))
    lead = t.lead
    assert lead is not None and lead.kind == "missing-rank" and lead.culprits == (1,)
    assert lead.seq == 3 and lead.others == (0, 2) and t.matched == 2
    assert lead.sentence.startswith("rank 1 never entered collective 3 of process group 0 "
                                    "(default_pg), all_reduce [[8]] Float")


def test_majority_names_the_odd_rank_on_a_type_mismatch(tmp_path: Path) -> None:
    good = [entry(1), entry(2)]
    per = {r: {**dump(good), "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1, 2]"}}}
           for r in (0, 2)}
    per[1] = {**dump([entry(1), entry(2, op="all_gather", sizes=[[2]])]),
              "pg_config": per[0]["pg_config"]}
    t = frmatch.analyze(frdump.read_dumps([str(write(tmp_path, per))]))
    assert t.lead is not None and t.lead.kind == "type" and t.lead.culprits == (1,)
    assert t.lead.decided_by == "majority"


def test_size_mismatch_tie_is_broken_by_the_new_call_site(tmp_path: Path) -> None:
    step = [frame("all_reduce", LIB, 3245), frame("backward", "/w/train.py", 30)]
    odd = [frame("all_reduce", LIB, 3245), frame("mean_loss", "/w/train.py", 40)]
    per = {0: dump([entry(1, frames=step), entry(2, sizes=[[1]], frames=odd)]),
           1: dump([entry(1, frames=step), entry(2, frames=step)])}
    t = frmatch.analyze(frdump.read_dumps([str(write(tmp_path, per))]))
    lead = t.lead
    assert lead is not None and lead.kind == "size" and lead.culprits == (0,)
    assert lead.decided_by == "call-site" and "train.py:40 in mean_loss" in lead.sentence


def test_tie_without_frames_names_no_culprit(tmp_path: Path) -> None:
    per = {0: dump([entry(1), entry(2, sizes=[[1]])]), 1: dump([entry(1), entry(2)])}
    t = frmatch.analyze(frdump.read_dumps([str(write(tmp_path, per, "json"))]))
    assert t.lead is not None and t.lead.culprits == () and "do not tell" in t.lead.sentence


def test_all_matched_is_no_desync(tmp_path: Path, capsys) -> None:
    per = {0: dump([entry(1), entry(2)]), 1: dump([entry(1), entry(2)])}
    d = write(tmp_path, per, "json")
    assert frmatch.analyze(frdump.read_dumps([str(d)])).mismatches == ()
    code = main(["analyze", "--trace", str(d), "--color", "never"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("UNKNOWN: Flight Recorder dumps of 2 ranks: all 2 recorded")


def test_dump_given_as_log_is_recognised_and_leads_the_output(tmp_path: Path, capsys) -> None:
    per = {0: dump([entry(1), entry(2), entry(3)]), 1: dump([entry(1), entry(2)])}
    d = write(tmp_path, per)
    code = main(["analyze", str(d / "nccl_trace_rank_0"), str(d / "nccl_trace_rank_1"),
                 "--color", "never"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[0].startswith("HUNG: rank 1 never entered collective 3 of process group 0")
    assert any("rank 1" in ln and "← culprit" in ln for ln in lines[1:6])


def test_dump_without_rank_in_its_name_is_one_line(tmp_path: Path, capsys) -> None:
    p = tmp_path / "trace.pkl"
    p.write_bytes(pickle.dumps(dump([entry(1)]), protocol=2))
    assert main(["analyze", "--trace", str(p)]) == 2
    assert "does not end with its rank" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the real sample

@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample not generated")
def test_real_gloo_dumps_name_rank_0_and_its_call_site() -> None:
    dumps = frdump.read_dumps([str(SAMPLE / "fr_trace")])
    assert [d.rank for d in dumps] == [0, 1] and all(d.fmt == "pickle" for d in dumps)
    t = frmatch.analyze(dumps)
    lead = t.lead
    assert lead is not None and lead.culprits == (0,) and lead.others == (1,)
    assert "mean_loss" in lead.sentence
