"""A multi-node job's logs (one folder per node) in one per-rank table, and the nodes' env
snapshots compared (DS246).

The node logs are the real lines of sample_logs/hang_desync_allreduce (DeepSpeed 0.19.8's
launcher, gloo tracebacks with torch's ``[rankN]:`` prefixes), split as two nodes of one rank each
would print them: each node's launch.py prints its own nnodes/node_rank, the job's
global_rank_mapping and its one spawned process (``--local_rank=0`` on both nodes); only those
launcher values are rewritten, in launch.py's own formats.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.logs.scan import scan_text

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_logs" / "hang_desync_allreduce" / "train.log"
HOSTS = ("node-a", "node-b")
MAPPING = "{'node-a': [0], 'node-b': [1]}"


def _split_by_node(dest: Path, keep_rank1: bool = True) -> list[Path]:
    """node-a/train.log and node-b/train.log: rank r's lines on node r, each node's launcher."""
    nodes: list[list[str]] = [[], []]
    for line in SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True):
        if re.search(r"\[launch\.py:\d+:main\]", line):
            spawned = re.search(r"--local_rank=(\d)", line)
            if spawned:  # one process per node: local rank 0 on each
                r = int(spawned.group(1))
                nodes[r].append(line.replace(f"--local_rank={r}", "--local_rank=0"))
                continue
            for k in (0, 1):
                nodes[k].append(
                    line.replace("nnodes=1, num_local_procs=2, node_rank=0",
                                 f"nnodes=2, num_local_procs=1, node_rank={k}")
                    .replace("{'localhost': [0, 1]}", MAPPING))
        elif line.startswith("[rank1]:"):
            if keep_rank1:
                nodes[1].append(line)
        else:
            nodes[0].append(line)
    out = []
    for host, lines in zip(HOSTS, nodes):
        (dest / host).mkdir()
        (dest / host / "train.log").write_text("".join(lines), encoding="utf-8")
        out.append(dest / host)
    return out


def test_node_folders_make_one_table_with_global_ranks_and_hosts(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:
    _split_by_node(tmp_path)
    code = main(["analyze", str(tmp_path), "--format", "json"])  # a folder of node folders
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and len(data["files"]) == 2
    table = data["ranks"]
    assert [(r["rank"], r["host"]) for r in table["ranks"]] == [(0, "node-a"), (1, "node-b")]
    assert table["culprit"]["ranks"] == [0] and table["culprit"]["kind"] == "desync"
    assert table["culprit"]["sentence"].startswith("rank 0 (on node-a) waited alone in the "
                                                   "all_reduce at hang_desync_allreduce.py:56")
    assert "rank 1 (on node-b) only waited" in table["culprit"]["sentence"]
    assert {g["label"] for g in table["groups"]} == {"rank 0 [node-a]", "rank 1 [node-b]"}


def test_a_silent_rank_on_another_node_is_mapped_to_its_global_rank(tmp_path: Path) -> None:
    """Node b's launcher spawned its local rank 0 (global rank 1), which printed nothing while
    rank 0 on node a timed out in all_reduce: rank 1 never entered it. Read as a local rank, the
    spawn line would have been rank 0's."""
    a, b = _split_by_node(tmp_path, keep_rank1=False)
    rep = run_analysis([str(a / "train.log"), str(b / "train.log")], engine="python")
    assert rep.ranks is not None and rep.ranks.culprit is not None
    by_rank = {r.rank: r for r in rep.ranks.ranks}
    assert by_rank[1].state == "silent" and by_rank[1].host == "node-b"
    assert by_rank[0].state == "timed-out" and by_rank[0].collective == "all_reduce"
    assert rep.ranks.culprit.ranks == (1,) and rep.ranks.culprit.kind == "outside"
    assert rep.ranks.culprit.sentence.startswith("rank 1 (on node-b) never entered all_reduce")
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "find where rank 1 was instead of the collective" in ds107.fix
    assert "raise the timeout (" not in ds107.fix


def test_deepspeeds_exit_line_names_the_last_spawned_rank_not_the_failed_one() -> None:
    """launch.py prints the ``cmd`` its spawn loop built last: in hang_desync_allreduce rank 0
    timed out and died first, and the exit line still shows --local_rank=1. No rank gets it."""
    text = SAMPLE.read_text(encoding="utf-8")
    exit_line = next(line for line in text.splitlines() if "exits with return code" in line)
    assert "'--local_rank=1'" in exit_line
    facts = scan_text(text, engine="python").ranks
    assert facts[1].exit_code is None and facts[0].exit_code is None
    assert facts[1].launched is not None and facts[1].launched.line == 11


def test_a_folder_without_logs_is_one_clear_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ds_config.json").write_text("{}", encoding="utf-8")
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no log file in it or its sub-folders" in err and "Traceback" not in err


def _snapshot(torch: str, nccl: str) -> dict[str, object]:
    return {"packages": {"torch": torch, "deepspeed": "0.16.2"},
            "cuda": {"torch_cuda": "12.4", "torch_nccl": nccl},
            "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "550.90.07",
                      "memory_total_bytes": 85520809984}]}


def test_env_snapshots_of_two_nodes_are_compared(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "ds_config.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1}', encoding="utf-8")
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "env-node0.json").write_text(json.dumps(_snapshot("2.5.1", "2.21.5")))
    (envs / "env-node1.json").write_text(json.dumps(_snapshot("2.4.1", "2.20.5")))
    main(["analyze", "--config", str(cfg), "--env", str(envs / "env-node0.json"),
          "--env", str(envs / "env-node1.json"), "--format", "json"])
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "DS246"]
    assert len(found) == 1
    assert "NCCL (torch): node0 2.21.5, node1 2.20.5" in found[0]["message"]
    assert "torch: node0 2.5.1, node1 2.4.1" in found[0]["message"]
    assert "deepspeed" not in found[0]["message"].split("differ:")[1].split(".")[0]
    # a folder of snapshots is the same two nodes
    main(["analyze", "--config", str(cfg), "--env", str(envs), "--format", "json"])
    again = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "DS246"]
    assert again == found
    # the same stack on both: nothing to say
    (envs / "env-node1.json").write_text(json.dumps(_snapshot("2.5.1", "2.21.5")))
    main(["analyze", "--config", str(cfg), "--env", str(envs), "--format", "json"])
    assert not [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "DS246"]


def test_report_reads_node_folders_and_every_nodes_env(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``report`` takes the inputs ``analyze`` takes: the node folders are read as their logs (the
    excerpt and the per-rank table span them) and every --env snapshot reaches the analysis, so
    DS246 and the culprit are in the issue body, the nodes' names hidden like any host."""
    (tmp_path / "logs").mkdir()
    _split_by_node(tmp_path / "logs")
    for name, torch, nccl in (("env-node0.json", "2.5.1", "2.21.5"),
                              ("env-node1.json", "2.4.1", "2.20.5")):
        (tmp_path / name).write_text(json.dumps(_snapshot(torch, nccl)), encoding="utf-8")
    out = tmp_path / "issue.md"
    code = main(["report", str(tmp_path / "logs"), "--env", str(tmp_path / "env-node0.json"),
                 "--env", str(tmp_path / "env-node1.json"), "--force", "-q", "-o", str(out)])
    body = out.read_text(encoding="utf-8")
    assert code == 0
    assert "DS246 env-differs-across-nodes" in body
    assert ("**Ranks** (2, by state): rank 0 (on <host-1>) waited alone in the all_reduce at "
            "hang_desync_allreduce.py:56 in mean_loss") in body
    table = body.split("**Ranks**", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    assert table.splitlines()[0].startswith("rank 0 [<host-1>]  timed out in all_reduce")
    assert table.splitlines()[0].endswith("← culprit") and len(table.splitlines()) == 2
    assert "node-a" not in body and "node-b" not in body
    assert "Log excerpt: first error in `train.log`" in body  # a file in a node folder
    capsys.readouterr()
