"""The checks that read a script's syntax tree share one parse per analysis (checks/common.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from dsdoctor.diagnose.pipeline import analyze_with_run
from dsdoctor.facts.inputs import AnalysisInputs, clear_cache

# The guide's "online" recovery after training, then a resumed train() (DS224's fire example;
# the three fp32-recovery checks, DS224, DS236 and DS237, all look at this script).
SCRIPT = '''from transformers.trainer_utils import get_last_checkpoint
from deepspeed.utils.zero_to_fp32 import load_state_dict_from_zero_checkpoint

checkpoint_dir = get_last_checkpoint(trainer.args.output_dir)
fp32_model = load_state_dict_from_zero_checkpoint(trainer.model, checkpoint_dir)
trainer.train(resume_from_checkpoint=checkpoint_dir)
'''


def test_one_parse_serves_every_tree_check(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    trees: list[str] = []
    real = ast.parse

    def counting(source, filename="<unknown>", *args, **kwargs):
        if isinstance(source, str) and "load_state_dict_from_zero_checkpoint(" in source:
            trees.append(filename)
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    clear_cache()
    report, _ = analyze_with_run(AnalysisInputs.of(scripts=[str(script)]))
    assert "DS224" in {f.rule for f in report.findings}
    # scriptcheck's own parse (named by path) and one shared parse for the tree checks
    assert len([t for t in trees if t == "<unknown>"]) == 1, trees
