"""Send/recv and coalesced collectives in Flight Recorder dumps, matched as torch 2.13.0's own
fr_trace does (torch/distributed/flight_recorder/components/utils.py ``match_coalesced_groups``,
``find_coalesced_group_with_non_p2p``; types.py ``Op.match``, ``P2P``).

tests/data/fr_p2p_gloo is a real CPU run (gloo, torch 2.13.0: p2p_mismatch.py in that folder):
rank 0 sends two tensors, rank 1 receives one and enters an all_reduce. gloo's recorder keeps no
send/recv entry (the ops take op ids, 2-4, but leave no entry), so that dump shows only the
all_reduces. The NCCL recorder does record them ("nccl:send 0->1" / "nccl:recv 1<-0",
``is_p2p``, ``p2p_seq_id``: the names types.py ``Op`` parses); the p2p tests add such entries, in
that format, to the real dumps' entries: hand-built, not recorded (no GPU here).
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

from dsdoctor.diagnose import frmatch
from dsdoctor.logs import frdump
from dsdoctor.logs.plainpickle import loads_plain

REAL = Path(__file__).resolve().parent / "data" / "fr_p2p_gloo"


def real(rank: int) -> dict[str, Any]:
    return loads_plain((REAL / f"nccl_trace_rank_{rank}").read_bytes())


def p2p(like: dict[str, Any], record: int, pseq: int, op: str, peer: str, sizes: list,
        created: int) -> dict[str, Any]:
    """A send/recv entry as the NCCL recorder writes one, the other fields from a real entry."""
    e = copy.deepcopy(like)
    e.update(record_id=record, p2p_seq_id=pseq, is_p2p=True, profiling_name=f"nccl:{op} {peer}",
             input_sizes=sizes if op == "send" else [], output_sizes=sizes if op == "recv" else [],
             input_dtypes=["Float"] if op == "send" else [],
             output_dtypes=["Float"] if op == "recv" else [], time_created_ns=created)
    return e


def write(tmp_path: Path, per_rank: dict[int, dict[str, Any]]) -> list[str]:
    for r, d in per_rank.items():
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(d, protocol=2))
    return [str(tmp_path)]


def with_entries(d: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    for i, e in enumerate(entries):
        e["record_id"] = i
    return {**d, "entries": entries}


def test_the_real_gloo_dump_records_no_send_or_recv() -> None:
    raw = {r: real(r) for r in (0, 1)}
    assert [e["profiling_name"] for e in raw[1]["entries"]] == ["gloo:all_reduce"] * 2
    assert [e["op_id"] for e in raw[1]["entries"]] == [1, 5]  # ops 2-4 (send, recv) left none
    t = frmatch.analyze(frdump.read_dumps([str(REAL)]))
    lead = t.lead
    # what the dump can tell: rank 0 never entered rank 1's second all_reduce
    assert lead is not None and lead.kind == "missing-rank" and lead.culprits == (0,)
    assert "p2p_mismatch.py:" in lead.sentence and not lead.p2p


def _as_nccl_records_it() -> dict[int, dict[str, Any]]:
    """The real run's entries with the send/recv ops the NCCL recorder would have written: the
    batch_isend_irecv exchange (3 floats each way), then rank 0's two sends of 4 floats and rank
    1's one recv, between the real all_reduces."""
    r0, r1 = real(0), real(1)
    a0, a1 = r0["entries"][0], r1["entries"]
    t = a0["time_created_ns"]
    e0 = [a0, p2p(a0, 0, 1, "send", "0->1", [[3]], t + 1), p2p(a0, 0, 2, "recv", "0<-1", [[3]], t + 2),
          p2p(a0, 0, 3, "send", "0->1", [[4]], t + 3), p2p(a0, 0, 4, "send", "0->1", [[4]], t + 4)]
    e1 = [a1[0], p2p(a1[0], 0, 1, "send", "1->0", [[3]], t + 1),
          p2p(a1[0], 0, 2, "recv", "1<-0", [[3]], t + 2),
          p2p(a1[0], 0, 3, "recv", "1<-0", [[4]], t + 3), a1[1]]
    return {0: with_entries(r0, e0), 1: with_entries(r1, e1)}


def test_a_send_without_its_recv_crossed_with_a_collective(tmp_path: Path) -> None:
    t = frmatch.analyze(frdump.read_dumps(write(tmp_path, _as_nccl_records_it())))
    lead = t.lead
    assert lead is not None and lead.kind == "desync" and lead.culprits == ()
    assert lead.p2p == "rank 0 sent 3 to rank 1, rank 1 received 2"
    assert lead.sentence.startswith("rank 0 waits in send 0->1 [[4]] Float at p2p_mismatch.py:")
    assert "which rank 1 never posted; rank 1 waits instead in collective 2" in lead.sentence
    assert "3 point-to-point send/recv pair(s) in the dumps matched" in t.notes


def test_a_send_without_its_recv_names_the_receiver(tmp_path: Path) -> None:
    per = _as_nccl_records_it()
    per[1]["entries"] = per[1]["entries"][:-1]  # rank 1 stopped after its recv: no all_reduce
    t = frmatch.analyze(frdump.read_dumps(write(tmp_path, per)))
    lead = t.lead
    assert lead is not None and lead.kind == "missing-rank" and lead.culprits == (1,)
    assert lead.others == (0,) and lead.p2p == "rank 0 sent 3 to rank 1, rank 1 received 2"
    assert lead.sentence.startswith("rank 1 never posted the recv that rank 0's send 0->1 [[4]]")
    assert "point-to-point #3 from rank 0 to rank 1" in lead.sentence


def test_a_recv_without_its_send_names_the_sender(tmp_path: Path) -> None:
    per = _as_nccl_records_it()
    per[0]["entries"] = per[0]["entries"][:3]  # rank 0 sent nothing after the exchange
    per[1]["entries"] = per[1]["entries"][:-1]
    t = frmatch.analyze(frdump.read_dumps(write(tmp_path, per)))
    lead = t.lead
    assert lead is not None and lead.culprits == (0,) and lead.others == (1,)
    assert lead.sentence.startswith("rank 0 never sent that rank 1's recv 1<-0")


def test_a_send_and_recv_of_different_sizes_is_a_size_mismatch(tmp_path: Path) -> None:
    per = _as_nccl_records_it()
    per[0]["entries"] = per[0]["entries"][:4]  # one send of 4 floats ...
    per[1]["entries"][3]["output_sizes"] = [[8]]  # ... received into 8
    per[1]["entries"] = per[1]["entries"][:4]
    t = frmatch.analyze(frdump.read_dumps(write(tmp_path, per)))
    lead = t.lead
    assert lead is not None and lead.kind == "size" and lead.culprits == ()
    assert "'[[4]]' of the send does not match the recv's output sizes: '[[8]]'" in lead.detail


def test_group_ranks_are_made_global_through_the_members(tmp_path: Path) -> None:
    """In a group of ranks [2, 3], "send 0->1" is global rank 2 to 3 (types.py
    _init_global_src_dst); a matched pair is no mismatch."""
    per = _as_nccl_records_it()
    for d in per.values():
        d["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[2, 3]"}}
        d["entries"] = d["entries"][1:3]  # the exchange only: it matches
    t = frmatch.analyze(frdump.read_dumps(write(tmp_path, {2: per[0], 3: per[1]})))
    assert t.lead is None and "2 point-to-point send/recv pair(s) in the dumps matched" in t.notes


def test_a_coalesced_collective_is_compared_op_by_op(tmp_path: Path) -> None:
    """Entries sharing a collective_seq_id are one coalesced collective (the ops of a
    _coalescing_manager, ended by its *_coalesced entry): the second op differs on rank 1."""
    per = {r: real(r) for r in (0, 1)}
    for r, d in per.items():
        first = d["entries"][0]
        ops = [copy.deepcopy(first) for _ in range(3)]
        ops[1]["input_sizes"] = ops[1]["output_sizes"] = [[2]] if r == 0 else [[5]]
        ops[2]["profiling_name"] = "nccl:allreduce_coalesced"
        d["entries"] = [first] + [dict(o, collective_seq_id=2) for o in ops]
        per[r] = with_entries(d, d["entries"])
    t = frmatch.analyze(frdump.read_dumps(write(tmp_path, per)))
    lead = t.lead
    assert lead is not None and lead.kind == "size" and lead.seq == 2 and t.matched == 1
    assert "[[2]]" in lead.detail and "[[5]]" in lead.detail
