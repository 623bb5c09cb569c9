"""The per-rank table and a hang's culprit (diagnose/ranks.py), on real watchdog lines.

Every line below is copied from the thread cited next to it (several torch releases' watchdog
formats); the 256-rank log is generated from those same line formats, only its numbers and rank
count chosen.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsdoctor.diagnose import ranks
from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.logs.scan import scan_text
from dsdoctor.render.analysis import render

REPO = Path(__file__).resolve().parents[1]

# https://github.com/hiyouga/LlamaFactory/issues/6269 (torch 2.5: "[PG 1 Rank r] Timeout at NCCL
# work"): three ranks, the same work, the same counts: no rank stands out.
LLAMAFACTORY_6269 = """\
[rank0]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 0] Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.
[rank0]:[E1206 18:44:16.994957078 ProcessGroupNCCL.cpp:621] [Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank0]:[E1206 18:44:16.994964417 ProcessGroupNCCL.cpp:627] [Rank 0] To avoid data inconsistency, we are taking the entire process down.
[rank2]:[E1206 18:44:16.994961143 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 2] Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.
[rank2]:[E1206 18:44:16.994981286 ProcessGroupNCCL.cpp:621] [Rank 2] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank2]:[E1206 18:44:16.994987462 ProcessGroupNCCL.cpp:627] [Rank 2] To avoid data inconsistency, we are taking the entire process down.
[rank6]:[E1206 18:44:16.995042142 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 6] Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.
"""

# https://github.com/OpenRLHF/OpenRLHF/issues/1126 (torch 2.6: "PG status" and the dump signal):
# rank 7 timed out at work 460631; rank 2 heard of rank 6's timeout, with the same counts.
OPENRLHF_1126 = """\
[rank2]:[E901 05:20:03.118859045 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 2] Received a dump signal due to a collective timeout from  rank 6 and we will try our best to dump the debug info. Last enqueued NCCL work: 460631, last completed NCCL work: 460630.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.
[rank7]:[E901 05:20:03.123992144 ProcessGroupNCCL.cpp:632] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=460631, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
[rank7]:[E901 05:20:03.124073319 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 7]  failure detected by watchdog at work sequence id: 460631 PG status: last enqueued work: 460631, last completed work: 460630
"""


def _table(text: str) -> ranks.RankTable:
    table = ranks.build(scan_text(text, engine="python").ranks)
    assert table is not None
    return table


def test_same_work_on_every_rank_is_no_culprit_and_only_then_a_slow_step() -> None:
    table = _table(LLAMAFACTORY_6269)
    assert table.culprit is None and table.agreement == "same-collective"
    assert [g.ranks for g in table.groups] == [(0, 2, 6)]
    assert table.lines() == ["ranks 0, 2, 6  timed out in a collective SeqNum=7753 (enqueued 7755, "
                             "completed 7752)"]
    row = table.ranks[0]
    assert (row.pg, row.seq, row.last_enqueued, row.last_completed) == (1, 7753, 7755, 7752)
    assert row.time == "E1206 18:44:16.994932383"


def test_a_rank_that_heard_of_another_ranks_timeout_did_not_time_out_itself() -> None:
    table = _table(OPENRLHF_1126)
    by_rank = {r.rank: r for r in table.ranks}
    assert by_rank[7].state == "timed-out" and by_rank[7].collective == "all_reduce"
    assert by_rank[2].state == "waiting"  # work 460631 pending, the same as rank 7's
    assert table.culprit is None  # same counts: neither stands out


def test_watchdog_lines_cut_at_120_columns_still_say_which_ranks_timed_out() -> None:
    # LLAMAFACTORY_6269's watchdog lines as a terminal 120 columns wide cuts them: the counts are
    # gone, the timeout of each rank is not.
    cut = "".join(line[:120] + "\n" for line in LLAMAFACTORY_6269.splitlines())
    assert "Timeout at NCCL work: 7753, last enqueued NCC\n" in cut
    table = _table(cut)
    assert {r.rank: r.state for r in table.ranks} == {0: "timed-out", 2: "timed-out", 6: "timed-out"}
    assert table.culprit is None


def test_a_cut_dump_signal_line_does_not_say_its_rank_timed_out() -> None:
    # OPENRLHF_1126's first line cut at 120 columns: "from rank 6" is gone, so whose timeout it
    # was is unknown; rank 7's own watchdog line still says it timed out.
    first, *rest = OPENRLHF_1126.splitlines()
    table = _table(first[:120] + "\n" + "\n".join(rest) + "\n")
    by_rank = {r.rank: r for r in table.ranks}
    assert by_rank[7].state == "timed-out"
    assert by_rank[2].state != "timed-out"


def test_ds107_advises_a_longer_timeout_only_when_every_rank_waits_in_the_same_collective(
        tmp_path: Path) -> None:
    log = tmp_path / "culprit-same.log"
    log.write_text(LLAMAFACTORY_6269)
    rep = run_analysis([str(log)], engine="python")
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "every rank waits in the same collective" in ds107.message
    assert "raise the timeout (Trainer" in ds107.fix


def _generated_256() -> str:
    """256 ranks on real torch 2.6 line formats (NVIDIA/nccl#1730's watchdog and PG status lines,
    vllm-omni#2928's dump signal, rank-prefixed frames, torch elastic's SignalException): 255
    ranks time out in all_reduce 956300; rank 7 never enqueued it, its last frame is generate."""
    out: list[str] = []
    for r in range(256):
        if r == 7:
            continue
        out.append(f"[rank{r}]:[E603 17:48:01.005271823 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
                   "caught collective operation timeout: WorkNCCL(SeqNum=956300, OpType=ALLREDUCE, "
                   "NumelIn=8652160, NumelOut=8652160, Timeout(ms)=1800000) ran for 1800068 "
                   "milliseconds before timing out.")
        out.append(f"[rank{r}]:[E603 17:48:01.005538748 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID "
                   f"0(default_pg) Rank {r}]  failure detected by watchdog at work sequence id: "
                   "956300 PG status: last enqueued work: 956300, last completed work: 956299")
    out.append("[rank7]:[E603 17:48:01.907342463 ProcessGroupNCCL.cpp:1890] [PG ID 0 PG GUID "
               "0(default_pg) Rank 7] Received a dump signal due to a collective timeout from  rank 3 "
               "and we will try our best to dump the debug info. Last enqueued NCCL work: 956299, "
               "last completed NCCL work: 956299.This is most likely caused by incorrect usages of "
               "collectives, e.g., wrong sizes used across ranks.")
    out += ["[rank7]: Traceback (most recent call last):",
            '[rank7]:   File "/home/u/proj/train.py", line 140, in <module>',
            "[rank7]:     main()",
            '[rank7]:   File "/home/u/proj/model.py", line 88, in evaluate',
            "[rank7]:     out = model.generate(**batch)",
            '[rank7]:   File "/opt/conda/lib/python3.10/site-packages/transformers/generation/utils.py",'
            " line 2215, in generate",
            "[rank7]:     result = self._sample(",
            "[rank7]: torch.distributed.elastic.multiprocessing.api.SignalException: Process 16749 "
            "got signal: 15"]
    return "\n".join(out) + "\n"


def test_256_ranks_read_in_at_most_15_lines_naming_the_rank_that_fell_behind(tmp_path: Path) -> None:
    log = tmp_path / "culprit-256.log"
    log.write_text(_generated_256())
    rep = run_analysis([str(log)], engine="python")
    table = rep.ranks
    assert table is not None and len(table.ranks) == 256
    assert table.culprit is not None and table.culprit.ranks == (7,)
    assert table.culprit.kind == "behind" and table.culprit.frame is not None
    assert table.culprit.frame.short == "model.py:88 in evaluate"
    lines = table.lines()
    assert len(lines) <= 15
    assert lines[0].startswith("rank 7 ") and "generate" in lines[0] and lines[0].endswith("culprit")
    assert any(line.startswith("ranks 0-6, 8-255 ") and "SeqNum=956300" in line for line in lines)
    # the verdict names it first; the text shows the table right after, short
    text = render(rep, "text")
    head = text.splitlines()
    assert head[0].startswith("HUNG: rank 7 never entered collective 956300")
    assert "ranks 0-6, 8-255 only waited" in text
    ranks_at = next(i for i, line in enumerate(head) if line.startswith("Ranks (256"))
    table_end = next(i for i, line in enumerate(head) if line.startswith("log: "))
    assert head[ranks_at - 1].startswith("Retry: ")  # the verdict, its retry line, the table
    assert ranks_at <= 5 and table_end - ranks_at - 1 == len(lines) <= 15
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "raise the timeout (Trainer" not in ds107.fix and "rank 7 fell behind" in ds107.fix
    data = json.loads(render(rep, "json"))
    assert data["ranks"]["culprit"]["ranks"] == [7] and data["ranks"]["count"] == 256
    assert {g["label"] for g in data["ranks"]["groups"]} == {"rank 7", "ranks 0-6, 8-255"}


def test_one_file_per_rank_makes_a_table(tmp_path: Path) -> None:
    """Logs named per rank (rank0.log, rank1.log) carry their rank without prefixes."""
    lines = LLAMAFACTORY_6269.splitlines()
    (tmp_path / "rank0.log").write_text(lines[0].split(":", 1)[1] + "\n")
    (tmp_path / "rank2.log").write_text(lines[3].split(":", 1)[1] + "\n")
    rep = run_analysis([str(tmp_path / "rank0.log"), str(tmp_path / "rank2.log")], engine="python")
    assert rep.ranks is not None and [r.rank for r in rep.ranks.ranks] == [0, 2]


def test_samples_name_the_rank_that_desynchronized_and_say_the_other_only_waited() -> None:
    folder = REPO / "sample_logs"
    rep = run_analysis([str(folder / "hang_desync_allreduce" / "train.log")], engine="python")
    assert rep.verdict is not None
    first = rep.verdict.sentence
    assert first.startswith("hung: rank 0 waited alone in the all_reduce at "
                            "hang_desync_allreduce.py:56 in mean_loss")
    assert "rank 1 only waited" in first
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "raise the timeout (" not in ds107.fix and "line 248" not in ds107.message
    rep = run_analysis([str(folder / "zero3_generate_hang" / "generate.log")], engine="python")
    assert rep.verdict is not None and rep.ranks is not None and rep.ranks.culprit is not None
    assert rep.ranks.culprit.ranks == (1,)  # rank 0's "Connection closed by peer" only followed
    assert "rank 0 only waited" in rep.verdict.sentence


def test_samples_name_the_rank_that_failed_first_and_the_rank_that_stalled_outside() -> None:
    folder = REPO / "sample_logs"
    # rank 1 raised in the user's check; rank 0 lost it in the next step's all-reduce
    rep = run_analysis([str(folder / "rank_failed_first" / "train.log")], engine="python")
    assert rep.ranks is not None and rep.ranks.culprit is not None and rep.verdict is not None
    culprit = rep.ranks.culprit
    assert culprit.ranks == (1,) and culprit.kind == "failed-first" and culprit.waited == (0,)
    assert culprit.frame is not None and culprit.frame.function == "check_batch"
    assert rep.verdict.sentence.startswith("failed: rank 1 died first on ValueError: batch 6")
    assert "rank 0 only waited for it" in rep.verdict.sentence
    # rank 1 slept in its DataLoader and printed nothing; rank 0 timed out in the token all-reduce
    rep = run_analysis([str(folder / "dataloader_stall" / "train.log")], engine="python")
    assert rep.ranks is not None and rep.ranks.culprit is not None and rep.verdict is not None
    by_rank = {r.rank: r for r in rep.ranks.ranks}
    assert by_rank[1].state == "silent" and by_rank[1].exit_code is None
    assert by_rank[0].state == "timed-out" and by_rank[0].call_site is not None
    assert by_rank[0].call_site.short == "dataloader_stall.py:72 in worker"
    assert rep.ranks.culprit.ranks == (1,) and rep.ranks.culprit.kind == "outside"
    assert rep.verdict.sentence.startswith("hung: rank 1 never entered all_reduce")
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "reading data" in ds107.fix and "raise the timeout (" not in ds107.fix


def test_a_rank_killed_without_a_word_is_the_one_the_other_lost() -> None:
    """killed_sigkill: SIGKILL leaves rank 1 no line of its own; rank 0 lost its peer."""
    rep = run_analysis([str(REPO / "sample_logs" / "killed_sigkill" / "train.log")],
                       engine="python")
    assert rep.ranks is not None and rep.ranks.culprit is not None
    assert rep.ranks.culprit.ranks == (1,) and rep.ranks.culprit.kind == "vanished"
    assert rep.ranks.culprit.waited == (0,)
