"""A send/recv mismatch on 2 CPU ranks (gloo) with the Flight Recorder on; each rank writes its
buffer (``torch._C._distributed_c10d._dump_fr_trace()``, the pickle NCCL's watchdog writes) to
``nccl_trace_rank_<rank>`` in the folder given.

After an all_reduce both ranks enter, rank 0 sends two tensors to rank 1, which receives one and
goes on into an all_reduce: rank 0 waits in its second send, rank 1 in the all_reduce, until the
5 s timeout. Run: ``python p2p_mismatch.py OUT_DIR PORT`` (torch 2.13.0, CPU).

What torch 2.13.0's recorder keeps of it under gloo: the all_reduces only (op_id 1, then 5 on
rank 1: the send/recv ops got op ids but no entry); see tests/test_frtrace_p2p.py.
"""

import datetime
import os
import sys

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist
import torch.multiprocessing as mp

OUT = sys.argv[1]


def worker(rank: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], TORCH_FR_BUFFER_SIZE="2000")
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=5))
    dist.all_reduce(torch.ones(4))
    ops = [dist.P2POp(dist.isend, torch.ones(3), 1 - rank),
           dist.P2POp(dist.irecv, torch.zeros(3), 1 - rank)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    try:
        if rank == 0:
            dist.send(torch.ones(4), 1)
            dist.send(torch.ones(4), 1)  # the bug: rank 1 receives one tensor only
        else:
            b = torch.zeros(4)
            dist.recv(b, 0)
            dist.all_reduce(b)
    except Exception as e:  # noqa: BLE001 - the timeout is the point; the buffer is written below
        print(rank, "raised", type(e).__name__, str(e)[:200], flush=True)
    with open(f"{OUT}/nccl_trace_rank_{rank}", "wb") as fh:
        fh.write(c10d._dump_fr_trace())
    os._exit(0)


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
