"""Reproducer: a batch whose sequence length is not a multiple of the Ulysses SP size.

Two CPU ranks (gloo) form one sequence-parallel group (sp size 2) and read a 7-token batch through
DeepSpeed's ``UlyssesSPDataLoaderAdapter`` (what Accelerate and the Trainer wrap the dataloader in
when ``parallelism_config`` has ``sp_backend="deepspeed"`` and ``sp_size > 1``). 7 is not divisible
by 2, so the adapter raises ``ValueError: batch's seqlen=7 isn't divisible by sp-size=2``.
Run each rank with torchrun's variables (RANK, WORLD_SIZE=2, MASTER_ADDR, MASTER_PORT, LOCAL_RANK).
"""

from __future__ import annotations

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter

SEQ_LEN = 7
SP_SIZE = 2


def main() -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    sp_group = dist.new_group(list(range(SP_SIZE)))
    ids = torch.arange(SEQ_LEN).unsqueeze(0)
    batch = {"input_ids": ids, "position_ids": ids.clone(), "labels": ids.clone()}
    adapter = UlyssesSPDataLoaderAdapter([batch], sp_rank=dist.get_rank(group=sp_group),
                                         sp_group=sp_group, sp_world_size=SP_SIZE,
                                         device=torch.device("cpu"))
    next(iter(adapter))


if __name__ == "__main__":
    main()
