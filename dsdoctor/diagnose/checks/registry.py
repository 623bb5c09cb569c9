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
    cluster_launch,
    config_keys,
    env_nodes,
    failures,
    fp16_zero0,
    fp32_recovery,
    fsdp_peft_wrap,
    inference_fit,
    infra,
    load_dtype,
    memory,
    node_local_storage,
    nvme_storage,
    offload_tuning,
    oom,
    optimizer,
    parallelism,
    peft_offload,
    precision,
    preflight,
    qlora,
    qlora_fsdp,
    release_traps,
    run_sources,
    script_loops,
    shm_leftovers,
    ssh,
    tf32,
    traceback_cut,
    trainer,
    zero,
    zero3_buckets,
    zero_checkpoint_load,
)

CheckFn = Callable[[Any, Any], Iterable[Any]]

#: The checks in rule-code order, each under its function's name: the hook key a rule writes.
_CHECK_FUNCTIONS: tuple[CheckFn, ...] = (
    precision.fp16_overflow_warmup,  # DS101
    precision.loss_scale_collapse,  # DS102
    precision.nan_loss,  # DS103
    precision.loss_stuck_at_zero,  # DS104
    oom.gpu_out_of_memory,  # DS105
    memory.cpu_oom_killed,  # DS106
    failures.collective_timeout,  # DS107
    failures.op_build_failure,  # DS108
    failures.trainer_mismatch_in_log,  # DS109
    failures.batch_size_assertion,  # DS110
    failures.offload_client_optimizer,  # DS111
    failures.port_in_use,  # DS112
    failures.rank_exited_nonzero,  # DS113
    infra.nccl_error,  # DS114
    infra.cuda_error,  # DS115
    infra.shm_exhausted,  # DS116
    infra.disk_full,  # DS117
    infra.job_time_limit,  # DS118
    infra.checkpoint_error,  # DS119
    ssh.ssh_failure,  # DS120
    traceback_cut.traceback_cut,  # DS121
    parallelism.autotp_data_inconsistency,  # DS130
    parallelism.ulysses_seqlen_not_divisible,  # DS131
    parallelism.master_weights_need_offload,  # DS132
    parallelism.vllm_weight_sync_failed,  # DS133
    precision.bf16_model_in_fp16,  # DS201
    trainer.zero3_generate_without_synced_gpus,  # DS202
    memory.offload_exceeds_cpu_ram,  # DS203
    precision.bf16_on_pre_ampere,  # DS204
    trainer.hf_deepspeed_config_dropped,  # DS205
    trainer.training_args_after_from_pretrained,  # DS206
    qlora.adapter_merge_under_deepspeed,  # DS207
    qlora.qlora_dtype_vs_quant_storage,  # DS208
    qlora.qlora_zero3_versions,  # DS209
    qlora.qlora_zero3_cpu_offload,  # DS210
    preflight.setup_does_not_fit,  # DS211
    preflight.offload_not_needed,  # DS212
    zero.zero_inference_below_stage3,  # DS213
    trainer.scheduler_type_ignored,  # DS214
    memory.single_gpu_buckets,  # DS215
    optimizer.untested_zero_optimizer,  # DS216
    optimizer.onebit_optimizer_setup,  # DS217
    bf16_numerics.bf16_grad_accumulation,  # DS218
    bf16_numerics.bf16_reductions,  # DS219
    script_loops.backward_bypasses_accelerate,  # DS220
    script_loops.fsdp_sharded_final_save,  # DS221
    peft_offload.peft_optimizer_offload,  # DS222
    tf32.tf32_without_ampere,  # DS223
    zero_checkpoint_load.engine_use_after_fp32_load,  # DS224
    fsdp_peft_wrap.fsdp_peft_without_wrap_policy,  # DS225
    qlora_fsdp.qlora_fsdp_versions,  # DS226
    qlora_fsdp.qlora_fsdp_ram_efficient_loading,  # DS227
    qlora_fsdp.qlora_fsdp_offload_params,  # DS228
    cluster_launch.slurm_tasks_per_node,  # DS229
    cluster_launch.launcher_env_by_hand,  # DS230
    offload_tuning.round_robin_gradients,  # DS231
    load_dtype.fp32_load_for_16bit_run,  # DS232
    inference_fit.zero_inference_does_not_fit,  # DS233
    nvme_storage.nvme_path_not_on_nvme,  # DS234
    node_local_storage.zero_shards_on_other_nodes,  # DS235
    fp32_recovery.fp32_recovery_during_training,  # DS236
    parallelism.autotp_package_versions,  # DS242
    fp32_recovery.fp32_load_without_checkpoint,  # DS237
    release_traps.zero_no_sync_assertion,  # DS126
    release_traps.weights_only_resume,  # DS127
    release_traps.no_sync_preflight,  # DS238
    release_traps.moe_zero3_leaf_modules,  # DS239
    env_nodes.env_differs_across_nodes,  # DS246
    shm_leftovers.shm_filled_by_leftovers,  # DS247
    config_keys.duplicate_keys,  # DS301
    config_keys.unknown_keys_ignored,  # DS302
    config_keys.unknown_keys_rejected,  # DS303
    zero.offload_param_below_stage3,  # DS304
    zero.offload_optimizer_without_zero,  # DS305
    zero.nvme_without_path,  # DS306
    zero.nvme_below_stage3,  # DS307
    precision.fp16_and_bf16,  # DS308
    trainer.batch_arithmetic,  # DS309
    trainer.auto_without_trainer,  # DS310
    trainer.trainer_mismatch,  # DS311
    memory.overlap_comm_buckets,  # DS312
    zero.lamb_with_offload,  # DS313
    zero.stage3_no_16bit_save,  # DS314
    qlora.fsdp_peft_orig_params,  # DS315
    qlora.qlora_storage_dtype,  # DS316
    qlora.qlora_zero3_init,  # DS317
    config_keys.numbers_as_strings,  # DS318
    config_keys.values_rejected,  # DS319
    config_keys.config_differs_from_log,  # DS320
    run_sources.run_sources_disagree,  # DS321
    optimizer.unknown_optimizer_or_scheduler,  # DS322
    accelerate_keys.zero3_init_flag,  # DS323
    accelerate_keys.mixed_precision_value,  # DS324
    zero3_buckets.zero3_buckets_vs_hidden,  # DS325
    parallelism.bf16_master_weights_without_offload,  # DS330
    parallelism.muon_silently_inactive,  # DS331
    fp16_zero0.fp16_zero0_unscaled_backward,  # DS332
    release_traps.deepcompile_torch_range,  # DS326
)
CHECKS: dict[str, CheckFn] = {fn.__name__: fn for fn in _CHECK_FUNCTIONS}

__all__ = ["CHECKS", "CheckFn"]
