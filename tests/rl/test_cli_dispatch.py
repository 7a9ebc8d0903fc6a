"""`jaxtom train` hands configs that name their own trainer to it (CToM), others to rl."""

from jaxtom.rl.cli import config_trainer


def test_ctom_configs_name_their_trainer_and_toy_uses_the_generic_one():
    from jaxtom.ctom.train import train_from_config

    assert config_trainer("configs/ctom_math_smollm2.py") is train_from_config
    assert config_trainer("configs/toy_cpu.py") is None
    assert config_trainer("configs/does_not_exist.py") is None


def test_bad_override_of_a_ctom_config_exits_2_and_names_the_field(capsys):
    from jaxtom.cli import main

    assert main(["train", "configs/ctom_math_smollm2.py", "trainer.total_steps=abc"]) == 2
    assert "trainer.total_steps" in capsys.readouterr().err
