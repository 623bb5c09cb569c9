#!/bin/bash
# the launch command of train.log (paths relative to the repository)
accelerate launch --config_file accelerate_config.yaml --main_process_port 53563 scripts/scenarios/accelerate_trainer_accumulation_mismatch.py --worker --output_dir out --max_steps 20 --logging_steps 5 --log_level info --logging_strategy steps --save_strategy no --bf16 True --learning_rate 1e-3 --max_grad_norm 1.0 --per_device_train_batch_size 8 --gradient_accumulation_steps 4 --report_to none --use_cpu True
