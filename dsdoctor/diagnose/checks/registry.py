"""The registry of rule checks: each rule names its check by this key (``hook: gpu_out_of_memory``).

The engine's loader checks the registry both ways: every rule's hook is registered here, and
every registered check belongs to a rule. Nothing is imported by a name written in a rule file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from dsdoctor.diagnose.checks import (
    accelerate_keys,
    bf16_numerics,
    config_keys,
    failures,
    fsdp_peft_wrap,
    infra,
    memory,
    oom,
    optimizer,
    peft_offload,
    precision,
    preflight,
    qlora,
    qlora_fsdp,
    run_sources,
    script_loops,
    tf32,
    trainer,
    zero,
    zero3_buckets,
    zero_checkpoint_load,
)

CheckFn = Callable[[Any, Any], Iterable[Any]]

#: hook key -> check function, in rule-code order.
CHECKS: dict[str, CheckFn] = {
    "fp16_overflow_warmup": precision.fp16_overflow_warmup,  # DS101
    "loss_scale_collapse": precision.loss_scale_collapse,  # DS102
    "nan_loss": precision.nan_loss,  # DS103
    "loss_stuck_at_zero": precision.loss_stuck_at_zero,  # DS104
    "gpu_out_of_memory": oom.gpu_out_of_memory,  # DS105
    "cpu_oom_killed": memory.cpu_oom_killed,  # DS106
    "collective_timeout": failures.collective_timeout,  # DS107
    "op_build_failure": failures.op_build_failure,  # DS108
    "trainer_mismatch_in_log": failures.trainer_mismatch_in_log,  # DS109
    "batch_size_assertion": failures.batch_size_assertion,  # DS110
    "offload_client_optimizer": failures.offload_client_optimizer,  # DS111
    "port_in_use": failures.port_in_use,  # DS112
    "rank_exited_nonzero": failures.rank_exited_nonzero,  # DS113
    "nccl_error": infra.nccl_error,  # DS114
    "cuda_error": infra.cuda_error,  # DS115
    "shm_exhausted": infra.shm_exhausted,  # DS116
    "disk_full": infra.disk_full,  # DS117
    "job_time_limit": infra.job_time_limit,  # DS118
    "checkpoint_error": infra.checkpoint_error,  # DS119
    "bf16_model_in_fp16": precision.bf16_model_in_fp16,  # DS201
    "zero3_generate_without_synced_gpus": trainer.zero3_generate_without_synced_gpus,  # DS202
    "offload_exceeds_cpu_ram": memory.offload_exceeds_cpu_ram,  # DS203
    "bf16_on_pre_ampere": precision.bf16_on_pre_ampere,  # DS204
    "hf_deepspeed_config_dropped": trainer.hf_deepspeed_config_dropped,  # DS205
    "training_args_after_from_pretrained": trainer.training_args_after_from_pretrained,  # DS206
    "adapter_merge_under_deepspeed": qlora.adapter_merge_under_deepspeed,  # DS207
    "qlora_dtype_vs_quant_storage": qlora.qlora_dtype_vs_quant_storage,  # DS208
    "qlora_zero3_versions": qlora.qlora_zero3_versions,  # DS209
    "qlora_zero3_cpu_offload": qlora.qlora_zero3_cpu_offload,  # DS210
    "setup_does_not_fit": preflight.setup_does_not_fit,  # DS211
    "offload_not_needed": preflight.offload_not_needed,  # DS212
    "zero_inference_below_stage3": zero.zero_inference_below_stage3,  # DS213
    "scheduler_type_ignored": trainer.scheduler_type_ignored,  # DS214
    "single_gpu_buckets": memory.single_gpu_buckets,  # DS215
    "duplicate_keys": config_keys.duplicate_keys,  # DS301
    "unknown_keys_ignored": config_keys.unknown_keys_ignored,  # DS302
    "unknown_keys_rejected": config_keys.unknown_keys_rejected,  # DS303
    "offload_param_below_stage3": zero.offload_param_below_stage3,  # DS304
    "offload_optimizer_without_zero": zero.offload_optimizer_without_zero,  # DS305
    "nvme_without_path": zero.nvme_without_path,  # DS306
    "nvme_below_stage3": zero.nvme_below_stage3,  # DS307
    "fp16_and_bf16": precision.fp16_and_bf16,  # DS308
    "batch_arithmetic": trainer.batch_arithmetic,  # DS309
    "auto_without_trainer": trainer.auto_without_trainer,  # DS310
    "trainer_mismatch": trainer.trainer_mismatch,  # DS311
    "overlap_comm_buckets": memory.overlap_comm_buckets,  # DS312
    "lamb_with_offload": zero.lamb_with_offload,  # DS313
    "stage3_no_16bit_save": zero.stage3_no_16bit_save,  # DS314
    "fsdp_peft_orig_params": qlora.fsdp_peft_orig_params,  # DS315
    "qlora_storage_dtype": qlora.qlora_storage_dtype,  # DS316
    "qlora_zero3_init": qlora.qlora_zero3_init,  # DS317
    "numbers_as_strings": config_keys.numbers_as_strings,  # DS318
    "values_rejected": config_keys.values_rejected,  # DS319
    "config_differs_from_log": config_keys.config_differs_from_log,  # DS320
    "run_sources_disagree": run_sources.run_sources_disagree,  # DS321
    "untested_zero_optimizer": optimizer.untested_zero_optimizer,  # DS216
    "onebit_optimizer_setup": optimizer.onebit_optimizer_setup,  # DS217
    "bf16_grad_accumulation": bf16_numerics.bf16_grad_accumulation,  # DS218
    "bf16_reductions": bf16_numerics.bf16_reductions,  # DS219
    "unknown_optimizer_or_scheduler": optimizer.unknown_optimizer_or_scheduler,  # DS322
    "zero3_init_flag": accelerate_keys.zero3_init_flag,  # DS323
    "backward_bypasses_accelerate": script_loops.backward_bypasses_accelerate,  # DS220
    "fsdp_sharded_final_save": script_loops.fsdp_sharded_final_save,  # DS221
    "peft_optimizer_offload": peft_offload.peft_optimizer_offload,  # DS222
    "tf32_without_ampere": tf32.tf32_without_ampere,  # DS223
    "engine_use_after_fp32_load": zero_checkpoint_load.engine_use_after_fp32_load,  # DS224
    "fsdp_peft_without_wrap_policy": fsdp_peft_wrap.fsdp_peft_without_wrap_policy,  # DS225
    "qlora_fsdp_versions": qlora_fsdp.qlora_fsdp_versions,  # DS226
    "qlora_fsdp_ram_efficient_loading": qlora_fsdp.qlora_fsdp_ram_efficient_loading,  # DS227
    "qlora_fsdp_offload_params": qlora_fsdp.qlora_fsdp_offload_params,  # DS228
    "mixed_precision_value": accelerate_keys.mixed_precision_value,  # DS324
    "zero3_buckets_vs_hidden": zero3_buckets.zero3_buckets_vs_hidden,  # DS325
}

__all__ = ["CHECKS", "CheckFn"]
