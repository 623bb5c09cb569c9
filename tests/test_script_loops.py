"""The AST reading behind DS220/DS221 (dsdoctor/diagnose/checks/script_loops.py)."""

from __future__ import annotations

from dsdoctor.diagnose.checks.script_loops import loop_calls

LOOP = """\
from accelerate import Accelerator
acc = Accelerator(mixed_precision="bf16")
model, opt, dl = acc.prepare(model, opt, dl)
for batch in dl:
    loss = model(**batch).loss
    {backward}
    opt.step()
"""


def test_the_name_bound_to_accelerator_is_followed() -> None:
    calls = loop_calls("train.py", LOOP.format(backward="acc.backward(loss)"))
    assert calls is not None
    assert "acc" in calls.accelerators
    assert [n for n, _ in calls.prepares] == [3]
    assert [n for n, _ in calls.acc_backward] == [6] and not calls.bare_backward


def test_bare_backward_and_a_grad_scalers_backward_are_bypasses() -> None:
    calls = loop_calls("train.py", LOOP.format(backward="loss.backward()"))
    assert calls is not None and [t for _, t in calls.bare_backward] == ["loss.backward()"]
    scaled = loop_calls("train.py", LOOP.format(backward="scaler.scale(loss).backward()"))
    assert scaled is not None and len(scaled.bare_backward) == 1


def test_trainer_accelerator_and_self_accelerator_count_as_the_accelerator() -> None:
    src = ("class T(Trainer):\n"
           "    def training_step(self, model, inputs):\n"
           "        loss = self.compute_loss(model, inputs)\n"
           "        self.accelerator.backward(loss)\n"
           "trainer.accelerator.backward(loss)\n")
    calls = loop_calls("t.py", src)
    assert calls is not None and len(calls.acc_backward) == 2 and not calls.bare_backward


def test_full_state_dict_switch_and_save_model_are_found() -> None:
    src = ('trainer.train()\n'
           'trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")\n'
           'trainer.save_model()\n')
    calls = loop_calls("t.py", src)
    assert calls is not None
    assert [n for n, _ in calls.full_state_dict] == [2]
    assert [n for n, _ in calls.save_model] == [3]


def test_a_script_that_does_not_parse_gives_nothing() -> None:
    assert loop_calls("t.py", "def (:\n") is None
