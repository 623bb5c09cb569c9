"""Scenario: a client optimizer ZeRO has not tested (torch.optim.SGD) passed to deepspeed.initialize.

A hand-written ``deepspeed.initialize`` loop for the tiny GPT-2 on 2 CPU ranks with ZeRO stage 2 and
no ``optimizer`` section: the script builds ``torch.optim.SGD`` itself and passes it in. SGD is not
in ZeRO's list of tested optimizers (``deepspeed/runtime/zero/utils.py``: torch Adam/AdamW/Adagrad,
DeepSpeed's FusedAdam/CPUAdam/CPUAdagrad/Lion), and the config lacks
``"zero_allow_untested_optimizer": true``, so ``DeepSpeedEngine._do_optimizer_sanity_check`` raises
``AssertionError: You are using an untested ZeRO Optimizer. Please add <"zero_allow_untested_optimizer":
true> in the configuration file to use it.`` on every rank before the first step.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "zero_untested_optimizer"
SCRIPT = Path(__file__).resolve()

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 10,
    "zero_optimization": {"stage": 2, "overlap_comm": False},
}


def worker() -> None:
    """One rank: deepspeed.initialize with a client torch.optim.SGD under ZeRO-2."""
    import torch

    import deepspeed

    args, model = _lm.start_rank()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           config=args.deepspeed_config)
    rank = torch.distributed.get_rank()
    batches = _lm.lm_batches(rank)
    for step in range(1, 11):
        ids = next(batches)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        if rank == 0:
            print(f"step {step}/10: loss = {loss.item():.4f}", flush=True)


def generate(out: Path) -> c.Outcome:
    """Run it and write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", _lm.model_config())
    run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
        SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=900)
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0 and "untested ZeRO Optimizer" in log,
              "DeepSpeed did not refuse the untested optimizer")
    c.write_expected(out, symptoms=["python-exception"], rules=["DS216"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "fp16-overflow", "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS111", "DS322", "DS113"],
                     fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "ZeRO refuses an untested client optimizer", """
A hand-written `deepspeed.initialize(model=..., optimizer=torch.optim.SGD(...), config=...)` loop
for a tiny GPT-2 (2 layers, 64 wide, `model_config.json`) on 2 ranks with ZeRO stage 2 and no
`optimizer` section in `ds_config.json`. SGD is not one of the optimizers ZeRO has tested, and the
config does not set `"zero_allow_untested_optimizer": true`, so DeepSpeed's optimizer sanity check
raises `AssertionError: You are using an untested ZeRO Optimizer. Please add
<"zero_allow_untested_optimizer": true> in the configuration file to use it.` on both ranks and the
launcher reports the failed ranks.

A correct analysis says the run failed and gives DS216 with the exact fix: add
`"zero_allow_untested_optimizer": true` at the top level of `ds_config.json` (or use AdamW); no
memory, hang or build symptom.

## Inputs
- `ds_config.json`: as above. `model_config.json`: the tiny GPT-2's config.
- Real DeepSpeed, 2 ranks, CPU accelerator, gloo. Nothing was patched. The worker is
  `scripts/scenarios/zero_untested_optimizer.py`.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
