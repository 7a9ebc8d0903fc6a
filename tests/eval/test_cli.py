import pytest

from jaxtom.cli import main
from jaxtom.eval.cli import is_mindzero_config


def test_eval_dispatches_on_the_config_kind():
    assert is_mindzero_config("configs/mindzero_gridworld_tiny.py")
    assert not is_mindzero_config("configs/ctom_math_smollm2.py")
    with pytest.raises(FileNotFoundError, match="config file not found"):
        is_mindzero_config("configs/nope.py")


def test_mindzero_eval_without_a_checkpoint_says_what_to_do(tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint at .*train first"):
        main(["eval", "configs/mindzero_gridworld_tiny.py", "--checkpoint",
              str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match="--checkpoint is for MindZero"):
        main(["eval", "configs/ctom_math_smollm2.py", "--checkpoint", str(tmp_path)])
