"""A launcher ending its ranks (logs/teardown.py), a terminal's ^C, a launcher's own traceback and
a Ray task's OOM: what they add to the symptoms and how the verdict reads them (issue 19)."""

from __future__ import annotations

from pathlib import Path

from dsdoctor.diagnose.pipeline import run_analysis

#: DeepSpeed's launcher ending its ranks, the paste cut after it (OpenRLHF/OpenRLHF#977)
KILLING = ("[2025-04-17 23:16:39,064] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 1619464\n"
           "[2025-04-17 23:16:39,162] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 1619465\n")
#: the same launcher sent SIGTERM (DeepSpeed 0.19.8, run here: sample_logs/stopped_sigterm)
RECEIVED_SIGTERM = ("[2026-11-28 08:40:08,834] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 16293\n"
                    "[2026-11-28 08:40:08,837] [INFO] [launch.py:262:sigkill_handler] Main process received SIGTERM, exiting\n")
#: a rank killed by SIGKILL, then the launcher's exit line (deepspeedai/DeepSpeed#3232)
SIGKILL_EXIT = ("[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n"
                "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', "
                "'main.py', '--local_rank=0'] exits with return code = -9\n")
#: torch elastic stopping the workers (hiyouga/LlamaFactory#8836), and after a death signal
#: (PrimeIntellect-ai/prime-rl#1360)
CLOSING = ("W0806 20:07:54.552742 148486 /site-packages/torch/distributed/elastic/multiprocessing/api.py:897] "
           "Sending process 148594 closing signal SIGTERM\n")
DEATH_SIGNAL = ("W1130 12:13:49.388000 124326 torch/distributed/elastic/agent/server/api.py:723] Received 15 "
                "death signal, shutting down workers\n")
#: the terminal's ^C echo glued to the launcher's line (huggingface/accelerate#2724)
CTRL_C = "^C[2024-05-26 15:06:40,046] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 22523\n"
#: a Ray task's torch OOM (NVIDIA-NeMo/RL#3793), and Ray's memory monitor (ray-project/ray#30312)
RAY_TASK_OOM = ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::DTensorPolicyWorkerV2.get_logprobs() "
                "(pid=2671339, ip=10.65.16.209, actor_id=d5836b60449efbd220b3c2f406000000, "
                "repr=DTensorPolicyWorkerV2[rank=0])\n")
RAY_MONITOR = "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
#: torchrun's own traceback after a SIGKILL, cut in its frames (ymcui/Chinese-LLaMA-Alpaca-2#92)
TORCHRUN_TRACEBACK = (
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 5688) "
    "of binary: /root/anaconda3/envs/pytorch201-cuda-118/bin/python\n"
    "Traceback (most recent call last):\n"
    '  File "/root/anaconda3/envs/pytorch201-cuda-118/bin/torchrun", line 33, in <module>\n'
    "    sys.exit(load_entry_point('torch==2.0.1', 'console_scripts', 'torchrun')())\n"
    '  File "/root/anaconda3/envs/pytorch201-cuda-118/lib/python3.10/site-packages/torch/distributed/run.py", '
    "line 794, in main\n"
    "    run(args)\n")


def analyzed(tmp_path: Path, text: str):
    log = tmp_path / "train.log"
    log.write_text(text, encoding="utf-8")
    return run_analysis([str(log)], engine="python")


def kinds(rep) -> set[str]:
    return {s.kind for s in rep.symptoms}


def test_killing_subprocess_alone_is_a_launcher_exit(tmp_path: Path) -> None:
    rep = analyzed(tmp_path, KILLING)
    exit_sym = next(s for s in rep.symptoms if s.kind == "launcher-nonzero-exit")
    assert exit_sym.count == 2 and exit_sym.first.line == 1
    assert "cpu-oom" not in kinds(rep) and "run-stopped" not in kinds(rep)
    assert rep.verdict.fate == "failed"
    assert rep.verdict.sentence == (
        "failed: a rank ended and the launcher stopped the others; the log holds no exit code or "
        "error of it (the launcher ended the ranks, line 1)")
    assert rep.exit_code == 1


def test_a_launcher_that_received_a_signal_is_stopped_not_an_exit(tmp_path: Path) -> None:
    rep = analyzed(tmp_path, RECEIVED_SIGTERM)
    assert "launcher-nonzero-exit" not in kinds(rep)
    assert rep.verdict.fate == "stopped"


def test_a_sigkill_exit_line_says_more_than_the_teardown(tmp_path: Path) -> None:
    rep = analyzed(tmp_path, SIGKILL_EXIT)
    assert "launcher-nonzero-exit" not in kinds(rep)
    assert rep.verdict.fate == "killed"


def test_elastic_closing_signals_alone_are_a_launcher_exit(tmp_path: Path) -> None:
    assert "launcher-nonzero-exit" in kinds(analyzed(tmp_path, CLOSING))
    rep = analyzed(tmp_path, DEATH_SIGNAL + CLOSING)
    assert "launcher-nonzero-exit" not in kinds(rep)
    assert rep.verdict.fate == "stopped"


def test_a_ctrl_c_echo_stops_the_run(tmp_path: Path) -> None:
    rep = analyzed(tmp_path, CTRL_C)
    assert "run-stopped" in kinds(rep) and "launcher-nonzero-exit" not in kinds(rep)
    assert rep.verdict.sentence.startswith(
        "stopped: the run was interrupted (KeyboardInterrupt: Ctrl-C or SIGINT) (line 1)")


def test_a_ray_tasks_oom_is_the_gpus_unless_ray_killed_it_for_the_host(tmp_path: Path) -> None:
    rep = analyzed(tmp_path, RAY_TASK_OOM)
    assert rep.verdict.sentence == "failed: the run ran out of GPU memory"
    rep = analyzed(tmp_path, RAY_TASK_OOM + RAY_MONITOR)
    assert rep.verdict.fate == "failed"
    assert "host RAM" in rep.verdict.sentence and "GPU" not in rep.verdict.sentence


def test_torchruns_own_traceback_is_no_exception_of_the_run(tmp_path: Path) -> None:
    rep = analyzed(tmp_path, TORCHRUN_TRACEBACK)
    assert "python-exception" not in kinds(rep)
    assert rep.verdict.fate == "killed"
    # the same frames under a rank's own frame are the run's
    rank_frame = '  File "/data/train.py", line 12, in <module>\n'
    rep = analyzed(tmp_path, TORCHRUN_TRACEBACK + rank_frame)
    assert "python-exception" in kinds(rep)
