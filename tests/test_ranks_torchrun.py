"""torchrun's ranks keyed by global rank and host across nodes.

torchrun's ``--tee`` prefix is ``[${role_name}${local_rank}]:`` (``[default1]:``, the node's
*local* rank: torch 2.13.0 torch/distributed/elastic/agent/server/local_elastic_agent.py:154);
``--log-dir`` writes ``attempt_0/<local_rank>/stdout.log`` (multiprocessing/api.py:290,322-329).
On a second node local rank 1 is global rank 3: the agent's "Rendezvous complete" block
(``local_ranks=[0, 1]`` / ``global_ranks=[2, 3]``, agent/server/api.py:553-580) and the failures
table (``host : node-b`` over ``rank : 3 (local_rank: 1)``, errors/__init__.py:184-190) say so.

tests/data/torchrun_elastic is a real run on this machine (torch 2.13.0, ``torchrun --nnodes=1
--nproc-per-node=2 --tee 3 --log-dir logdir``, LOGLEVEL=INFO; rank 1 raises). The second node is
that run's console log with only the numbers a second node prints rewritten (group_rank, the
global ranks, the ``[rankN]:`` prefix, the failures table's rank and host).
"""

from __future__ import annotations

import re
from pathlib import Path

from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.logs.reader import local_rank_from_path, normalize

DATA = Path(__file__).resolve().parent / "data" / "torchrun_elastic"
CONSOLE = DATA / "console.log"


def _as_node_b(text: str) -> str:
    """The console log as node 1 of a 2-node job (2 ranks per node) prints it."""
    text = text.replace("group_rank=0", "group_rank=1").replace("group_world_size=1",
                                                                 "group_world_size=2")
    text = text.replace("global_ranks=[0, 1]", "global_ranks=[2, 3]")
    text = re.sub(r"\[rank(\d)\]:", lambda m: f"[rank{int(m.group(1)) + 2}]:", text)
    text = re.sub(r"rank      : (\d) \(local_rank: (\d)\)",
                  lambda m: f"rank      : {int(m.group(1)) + 2} (local_rank: {m.group(2)})", text)
    return text.replace("host      : localhost", "host      : node-b")


def _node_a(text: str) -> str:
    """Node 0 still running: its agent's lines and its ranks' prints, no failure."""
    keep = [line for line in text.splitlines(keepends=True)
            if line.startswith("I1128") or re.match(r"\[default\d\]:step ", line)]
    return "".join(keep)


def test_the_tee_prefix_is_a_local_rank_and_rank_prefix_global() -> None:
    assert normalize(b"[default1]:step 1 | loss 2.0").local_rank
    inner = normalize(b"[default1]:[rank3]: ValueError: x")
    assert (inner.rank, inner.local_rank) == (3, False)
    assert local_rank_from_path("logdir/none_2c81bl2s/attempt_0/1/stdout.log") == 1
    assert local_rank_from_path("logs/rank1/stdout.txt") is None


def test_one_node_real_run_keeps_its_ranks() -> None:
    report = run_analysis(logs=(str(CONSOLE),))
    table = report.ranks
    assert table is not None and [s.rank for s in table.ranks] == [0, 1]
    by_rank = {s.rank: s for s in table.ranks}
    assert by_rank[1].state == "failed" and by_rank[0].state != "failed"
    assert all(s.host is None for s in table.ranks)  # one node: no host column


def test_two_nodes_key_the_table_by_global_rank_and_host(tmp_path: Path) -> None:
    text = CONSOLE.read_text(encoding="utf-8")
    (tmp_path / "node-a").mkdir()
    (tmp_path / "node-b").mkdir()
    (tmp_path / "node-a" / "console.log").write_text(_node_a(text), encoding="utf-8")
    (tmp_path / "node-b" / "console.log").write_text(_as_node_b(text), encoding="utf-8")
    report = run_analysis(logs=(str(tmp_path / "node-a" / "console.log"),
                                str(tmp_path / "node-b" / "console.log")))
    table = report.ranks
    assert table is not None
    by_rank = {s.rank: s for s in table.ranks}
    assert sorted(by_rank) == [0, 1, 2, 3]  # node-b's [default0]/[default1] are ranks 2 and 3
    assert by_rank[3].state == "failed" and "rank 1 fails on purpose" in (by_rank[3].exception or "")
    assert by_rank[3].host == "node-b"
    assert by_rank[1].state != "failed"  # node-a's local rank 1 is not node-b's
    lines = table.lines()
    assert lines[0].startswith("rank 3 [node-b]") and "failed: ValueError" in lines[0], lines
    # node-b's other rank, stopped by its agent (the failures table's "exitcode : -15")
    assert lines[1] == "rank 2 [node-b]  exited with code -15", lines
    assert lines[2].startswith("ranks 0-1  ") and "[" not in lines[2], lines  # node-a: no host


def test_log_dir_files_take_the_global_rank_of_their_node(tmp_path: Path) -> None:
    """node-b/console.log (the agent's block) and node-b/logdir/.../attempt_0/1/stderr.log
    (the real file, its [rank1]: rewritten to rank 3): the stdout.log beside it, which has no
    prefix at all, is rank 3's too."""
    node = tmp_path / "node-b"
    src = next(DATA.glob("logdir/*/attempt_0/1"))
    dest = node / "logdir" / src.parent.parent.name / "attempt_0" / "1"
    dest.mkdir(parents=True)
    (node / "console.log").write_text(
        "".join(line for line in _as_node_b(CONSOLE.read_text(encoding="utf-8"))
                .splitlines(keepends=True) if line.startswith("I1128")), encoding="utf-8")
    (dest / "stdout.log").write_text((src / "stdout.log").read_text(encoding="utf-8"))
    (dest / "stderr.log").write_text(_as_node_b((src / "stderr.log").read_text(encoding="utf-8")))
    report = run_analysis(logs=(str(node / "console.log"), str(dest / "stdout.log"),
                                str(dest / "stderr.log")))
    table = report.ranks
    assert table is None or all(s.rank == 3 for s in table.ranks)
    facts = {s.rank for s in (table.ranks if table else ())}
    assert 1 not in facts


def test_a_node_folder_takes_its_log_dir_files_too() -> None:
    """``analyze node/``: torchrun's own --log-dir levels (<run_id>/attempt_0/<local_rank>) are
    not counted against the folder depth, so its per-rank files are read with the console log."""
    from dsdoctor.logs.logdirs import expand

    found = expand([str(DATA)])
    assert sum("/attempt_0/" in p for p in found) == 4 and str(CONSOLE) in found
    table = run_analysis(logs=tuple(found)).ranks
    assert table is not None
    assert [line.split("  ")[0] for line in table.lines()] == ["rank 1", "rank 0"]
    assert table.lines()[1] == "rank 0  exited with code -15"


def test_the_verdict_names_the_failed_ranks_exit_code_not_the_siblings_sigterm() -> None:
    """The failures table lists rank 0 with -15 (SIGTERM: the agent stopped it once rank 1 had
    failed) and rank 1 with 1: the run ended on rank 1's exit 1, not on the SIGTERM it caused."""
    rep = run_analysis([str(CONSOLE)], engine="python")
    assert "exitcode  : -15" in CONSOLE.read_text() and "exitcode  : 1 " in CONSOLE.read_text()
    assert rep.verdict.sentence.endswith("(exit 1)"), rep.verdict.sentence
    assert "SIGTERM" not in rep.verdict.sentence
