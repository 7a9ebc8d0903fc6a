"""Config loading, overrides and validation; `jaxtom train` rejects bad configs with exit 2."""

from pathlib import Path

import pytest

from jaxtom import cli
from jaxtom.config import ConfigError, apply_overrides, load_config

ROOT = Path(__file__).resolve().parents[1]
TOY = str(ROOT / "configs" / "toy_cpu.py")


def test_toy_config_loads():
    c = load_config(TOY)
    assert c.task.name == "toy_token" and c.trainer.group_size >= 2


def test_overrides_are_typed():
    c = load_config(TOY, ["step.learning_rate=3e-4", "trainer.total_steps=7",
                          "trainer.progress=false", "trainer.stop_tokens=(1, 2)",
                          "mesh.data=-1", "trainer.workdir=/tmp/x"])
    assert c.step.learning_rate == 3e-4 and c.trainer.total_steps == 7
    assert c.trainer.progress is False and c.trainer.stop_tokens == (1, 2)
    assert c.mesh.data == -1 and c.trainer.workdir == "/tmp/x"
    assert isinstance(apply_overrides(c, ["step.kl_coef=1"]).step.kl_coef, float)


@pytest.mark.parametrize("override, field, expected", [
    ("step.learning_rate=abc", "step.learning_rate", "a number"),
    ("step.learning_rate=-1", "step.learning_rate", "a positive number"),
    ("trainer.group_size=1", "trainer.group_size", "an int >= 2"),
    ("trainer.total_steps=2.5", "trainer.total_steps", "an int"),
    ("trainer.progress=maybe", "trainer.progress", "true or false"),
    ("step.reference=copy", "step.reference", "one of"),
    ("trainer.advantage_scale=global", "trainer.advantage_scale", "one of"),
    ("trainer.advantage_std_floor=-1", "trainer.advantage_std_floor", "a number >= 0"),
    ("trainer.explore_temperature=-1", "trainer.explore_temperature", "a number >= 0"),
    ("trainer.shared_fixed_rows=true", "trainer.shared_fixed_rows",
     "false unless trainer.share_prompts"),
    ("step.learnin_rate=1", "step.learnin_rate", "a field of step"),
    ("optim.lr=1", "optim.lr", "a section among"),
    ("model.lora_rank=4", "step.lora", "must agree with model.lora_rank=4"),
    ("model.num_heads=3", "model.num_heads", "a multiple of model.num_kv_heads"),
    ("trainer.row_len=5", "trainer.row_len", ">= task.prompt_len + trainer.max_new_tokens"),
    ("mesh.fsdp=0", "mesh", "positive sizes"),
    ("model.path=/does/not/exist", "model.path", "an existing HF directory"),
    ("learning_rate", "learning_rate", "section.field=value"),
])
def test_bad_config_one_line_exit_2_nothing_written(override, field, expected, tmp_path, capsys):
    workdir = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        load_config(TOY, [f"trainer.workdir={workdir}", override])
    assert err.value.field == field and expected in err.value.expected
    rc = cli.main(["train", TOY, f"trainer.workdir={workdir}", override])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(lines) == 1 and lines[0].startswith(f"config error: {field}: expected")
    assert not workdir.exists()


def test_missing_config_file(capsys):
    assert cli.main(["train", "configs/nope.py"]) == 2
    assert "config error: CONFIG: expected a path" in capsys.readouterr().err


@pytest.mark.parametrize("std", [0.02, 0.1])
def test_initializer_range_sets_a_random_models_weight_scale(std):
    """`model.initializer_range` reaches every normal-initialised weight of a from-scratch
    decoder (the CToM CPU default needs 0.1 to learn copying; a field the init ignored would
    silently train the 0.02 model)."""
    import numpy as np
    from jaxtom.config import ModelSection
    from jaxtom.models import init_decoder
    section = ModelSection(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16, initializer_range=std)
    model = init_decoder(section.random_model_config(), seed=0)
    weights = {"embed": model.embed_tokens[...], "q_proj": model.layers.q_proj[...],
               "down_proj": model.layers.down_proj[...]}
    for name, w in weights.items():  # thousands of draws: the sample std is within 5%
        assert abs(float(np.std(np.asarray(w))) / std - 1) < 0.05, name


def test_initializer_range_reaches_the_vision_tower_of_a_random_qwen3_vl(tmp_path):
    """A from-scratch Qwen3-VL (image observations) draws its vision tower at the same std
    as its decoder: the tower must not silently keep 0.02 when the config says otherwise."""
    import dataclasses
    import numpy as np
    from jaxtom.mindzero.experiments_vl import tiny_vl_config
    from jaxtom.mindzero.vl_train import build_vl_model
    from jaxtom.mindzero.goals_text import make_episodes
    from jaxtom.mindzero.observation import HostEpisodes
    cfg = tiny_vl_config()
    cfg = dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, initializer_range=0.1, vocab_size=320),
        mindzero=dataclasses.replace(cfg.mindzero, data=dataclasses.replace(
            cfg.mindzero.data, train_episodes=4, eval_episodes=2)))
    train, test = make_episodes(cfg)
    views = (HostEpisodes.from_episodes(train), HostEpisodes.from_episodes(test))
    model, _ = build_vl_model(cfg, tmp_path, views=views)
    v = model.visual
    assert v.config.initializer_range == 0.1
    for name, w in {"patch_embed": v.patch_embed[...], "qkv": v.blocks.qkv[...],
                    "merger fc1": v.merger.fc1[...]}.items():  # thousands of draws
        assert abs(float(np.std(np.asarray(w))) / 0.1 - 1) < 0.05, name
