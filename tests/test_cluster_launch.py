"""#SBATCH directives and per-node launchers read from job scripts (facts/launch.py), the input of
DS229; lines are the Transformers DeepSpeed guide's launch.slurm (000 §SLURM)."""

from __future__ import annotations

from dsdoctor.facts.launch import sbatch_options, spawning_launch

GUIDE_SLURM = """#SBATCH --job-name=test-nodes        # name
#SBATCH --nodes=2                    # nodes
#SBATCH --ntasks-per-node=1          # crucial - only 1 task per dist per node!
#SBATCH --time 20:00:00              # maximum execution time (HH:MM:SS)
#SBATCH -N 2

export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
srun --jobid $SLURM_JOBID bash -c 'python -m torch.distributed.run \\
 --nproc_per_node $GPUS_PER_NODE --nnodes $SLURM_NNODES --node_rank $SLURM_PROCID \\
your_program.py --deepspeed ds_config.json'
"""


def test_sbatch_options_with_their_lines() -> None:
    opts = sbatch_options(GUIDE_SLURM)
    assert opts["ntasks-per-node"] == ("1", 3)
    assert opts["nodes"] == ("2", 2)  # the first of --nodes=2 and -N 2 wins
    assert opts["time"] == ("20:00:00", 4)


def test_the_launcher_inside_srun_bash_c_is_found() -> None:
    found = spawning_launch(GUIDE_SLURM)
    assert found is not None and found[0] == 8 and "torch.distributed.run" in found[1]


def test_a_deepspeed_flag_is_not_a_launcher() -> None:
    assert spawning_launch("srun python train.py --deepspeed ds_config.json\n") is None
    assert spawning_launch("deepspeed --num_gpus 8 train.py\n") == (1, "deepspeed --num_gpus 8 train.py")
