import os, sys, time  # noqa: E401, F401, I001 - the script exactly as run (its traceback cites line 7)
import torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
print(f"step 1 | loss 2.0 rank={r} local={os.environ['LOCAL_RANK']}", flush=True)
if r == 1:
    raise ValueError("rank 1 fails on purpose")
time.sleep(3)
