"""Normalization of the pieces of real log lines the patterns see."""

from __future__ import annotations

import pytest

from dsdoctor.logs.reader import normalize, rank_from_filename


@pytest.mark.parametrize(
    ("raw", "text", "rank"),
    [
        # torch >= 2.2 rank prefix (ms-swift#5943)
        (b"[rank3]: torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory.", 3),
        # torchrun --tee prefix
        (b"[default1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught", "[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught", 1),
        # mpirun --tag-output
        (b"[1,3]<stderr>:RuntimeError: NCCL error", "RuntimeError: NCCL error", 3),
        # srun --label / deepspeed multi-node "3: "
        (b"3: [2023-04-28 06:51:29,903] [INFO] [loss_scaler.py:188:update_scale] x", "[2023-04-28 06:51:29,903] [INFO] [loss_scaler.py:188:update_scale] x", 3),
        # pdsh host prefix of the deepspeed multi-node launcher, then a rank prefix
        (b"node-12: [rank5]: ValueError: bad", "ValueError: bad", 5),
        # Ray's log-collector prefix (Awesome-ML-SYS-Tutorial#106, verl)
        (b"(WorkerDict pid=12504) torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory.", None),
        (b"(raylet) A worker died or was killed", "A worker died or was killed", None),
        # NeMo-Run / torchx role prefix before torchrun's (NeMo#14348)
        (b"i.pretrain/0 [default2]:[rank2]: RuntimeError: Rank 2", "RuntimeError: Rank 2", 2),
        # markdown quote of a pasted log (DeepSpeed#3869)
        (b"> torch.cuda.OutOfMemoryError: CUDA out of memory.", "torch.cuda.OutOfMemoryError: CUDA out of memory.", None),
        (b">> > [rank0]: x", "x", 0),
        # ANSI colours of the DeepSpeed logger and rich
        (b"\x1b[32m[INFO]\x1b[0m OVERFLOW!", "[INFO] OVERFLOW!", None),
        # NUL bytes and invalid UTF-8 survive
        (b"loss\x00 \xff\xfe nan", "loss \ufffd\ufffd nan", None),
        (b"trailing crlf\r\n", "trailing crlf", None),
        # words that look like a host prefix are content, not prefixes
        (b"RuntimeError: Error building extension 'cpu_adam'", "RuntimeError: Error building extension 'cpu_adam'", None),
        (b"Epoch 1: 100%|", "Epoch 1: 100%|", None),
    ],
)
def test_normalize(raw: bytes, text: str, rank: int | None) -> None:
    seg = normalize(raw)
    assert seg.text == text
    assert seg.rank == rank


def test_host_prefix_is_kept_as_host() -> None:
    seg = normalize(b"worker-3: Killed")
    assert seg.host == "worker-3"
    assert seg.text == "Killed"


def test_huge_segment_is_capped() -> None:
    seg = normalize(b"x" * 10_000_000)
    assert len(seg.text) <= 16_384


@pytest.mark.parametrize(
    ("name", "rank"),
    [("rank3.log", 3), ("train_rank_12.log.gz", 12), ("logs/rank-0.txt", 0), ("train.log", None),
     ("frankly.log", None)],
)
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert rank_from_filename(name) == rank


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"loss\x1bc nan", "loss nan"),  # full reset (RIS)
        (b"a\x1b(0b\x1b)Bc", "abc"),  # charset switches (nF)
        (b"\x1b]0;title\x07step", "step"),  # OSC window title
        (b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink
        ("\u009b2Jx\u009d0;t\u009cy\u0085z".encode(), "xyz"),  # 8-bit CSI, OSC, NEL (C1)
        (b"bell\x07 del\x7f lone esc\x1b", "bell del lone esc"),
        (b"tab\tkept", "tab\tkept"),
    ],
)
def test_terminal_controls_are_removed(raw: bytes, text: str) -> None:
    assert normalize(raw).text == text


def test_read_line_capped_and_skip_lines() -> None:
    import io

    from dsdoctor.logs.reader import read_line_capped, skip_lines

    stream = io.BufferedReader(io.BytesIO(b"a\n" * 5 + b"x" * 1000 + b"\nlast\n"))
    rest = skip_lines(stream, 5)
    assert read_line_capped(rest, 10) == b"x" * 10 + b"\n"  # the rest of the long line skipped
    assert read_line_capped(rest, 10) == b"last\n"
    assert read_line_capped(rest, 10) == b""
