"""End to end on CPU: real SmolLM2 weights, scripted simulator, counterfactual targets, two
GRPO updates with the eta-capped prediction NLL; then `jaxtom eval` prints the table 1/2
columns. Slow (minutes)."""

import json

import pytest



@pytest.mark.slow
def test_train_two_steps_then_eval(tmp_path, capsys):
    from jaxtom.cli import main
    from jaxtom.ctom.train import train_from_config
    workdir = tmp_path / "run"
    # `jaxtom train` (issue 4's CLI) dispatches CToM configs here
    state = train_from_config("configs/ctom_math_smollm2.py", [f"trainer.workdir={workdir}"])
    assert int(state.step) == 2
    lines = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for m in lines:
        assert 0.0 < m["eta"] <= 1.0
        assert m["prediction_targets"] >= 0 and "reward_mean" in m
    capsys.readouterr()
    rc = main(["eval", "configs/ctom_math_smollm2.py", f"trainer.workdir={workdir}"])
    out = capsys.readouterr().out
    assert rc == 0
    for column in ("Score", "Turns", "Tokens", "Replies", "ReplyTokens", "ASK", "DRAFT",
                   "COMMIT", "LexF1"):
        assert column in out
