"""Reproducer: ``bf16.bf16_master_weights_and_grads`` at ZeRO-2 without optimizer offload.

One CPU rank (gloo), a two-layer model and a client torch AdamW: DeepSpeed (0.18.3 and later)
keeps bf16 master weights only with ZeRO-Offload and DeepSpeedCPUAdam, so the ZeRO optimizer's
constructor asserts ("Master weights feature requires ZeRO-2 Offload with DeepSpeedCPUAdam").
Run: ``deepspeed --num_gpus 1 bf16_master_weights_no_offload.py`` or with torchrun's variables
(RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 LOCAL_RANK=0 python ...).
"""

from __future__ import annotations

import deepspeed
import torch

CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "bf16": {"enabled": True, "bf16_master_weights_and_grads": True},
    "zero_optimization": {"stage": 2},
}


def main() -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    deepspeed.initialize(model=model, optimizer=optimizer, config=CONFIG)


if __name__ == "__main__":
    main()
