"""The MindZero gridworld experiments with image observations (`configs/
mindzero_gridworld_qwen3vl_*.py`): the paper's setting, in which Qwen3-VL-4B/8B read Figure
7's assistance prompt with a 500x500 picture of the grid (50 px per cell, 256 image tokens)
instead of a transcript (`jaxtom.mindzero.vl_train`).

The paper configs are `experiments.paper_config` (appendix A.1's optimiser, batch and data
settings) with the image observation; the vision tower trains, as in the public MindZero
config (`step.freeze_vision=true` keeps it fixed).
"""

import dataclasses

from jaxtom.config import Config
from jaxtom.mindzero.experiments import paper_config, tiny_config


def _with_images(cfg: Config, cell_size: int) -> Config:
    """`cfg` reading pictures; no shared-prompt packing (image rows carry their own
    picture, so `trainer.share_prompts` is refused for them)."""
    mz = cfg.mindzero
    return dataclasses.replace(
        cfg, trainer=dataclasses.replace(cfg.trainer, share_prompts=False),
        mindzero=dataclasses.replace(mz, data=dataclasses.replace(
            mz.data, observation="image", image_cell_size=cell_size)))


def vl_paper_config(name: str, model_dir: str) -> Config:
    """The paper's run for the Qwen3-VL checkpoint at $JAXTOM_MODELS/`model_dir`, with the
    rendered grid as the observation. Check the mesh with `jaxtom plan CONFIG` first."""
    return _with_images(paper_config(name, model_dir, "qwen3"), 50)


def tiny_vl_config() -> Config:
    """A CPU smoke run of the image path: a tiny random Qwen3-VL (2-block vision tower, the
    tiny decoder's text side) from scratch over a BPE of the image prompts' text, pictures at
    16 px per cell (one patch per cell: 100 patches, 25 image tokens), a short
    format warm-up, then SSRL. It checks that everything runs, not that it learns. Two
    hypotheses from the `approached` teacher, sampled at 0.7 with duplicates merged: the text
    default's four listed hypotheses and ranked separators read the compact observation,
    which a picture does not have."""
    cfg = _with_images(tiny_config(), 16)
    m, mz = cfg.model, cfg.mindzero
    mz = dataclasses.replace(
        mz, data=dataclasses.replace(mz.data, num_particles=2),
        warmup=dataclasses.replace(mz.warmup, teacher="approached", evidence_order="none"),
        reward=dataclasses.replace(mz.reward, duplicates="merge"))
    return dataclasses.replace(
        cfg,
        model=dataclasses.replace(m, hidden_size=64, intermediate_size=128, num_layers=2,
                                  num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True),
        step=dataclasses.replace(cfg.step, total_steps=20, warmup_steps=0,
                                 learning_rate=6e-4, kl_coef=0.0),
        trainer=dataclasses.replace(cfg.trainer, workdir="runs/mindzero_gridworld_qwen3vl_tiny",
                                    total_steps=20, prompts_per_step=4, group_size=4,
                                    eval_every=10, checkpoint_every=10, temperature=0.7,
                                    max_new_tokens=48, row_len=128),
        mindzero=dataclasses.replace(
            mz, data=dataclasses.replace(mz.data, train_episodes=40, eval_episodes=8,
                                         stride=4, val_episodes=0),  # text path only
            warmup=dataclasses.replace(mz.warmup, steps=10, batch_size=8, min_distinct=0,
                                       min_lead=0.0, retries=0, check_at=0),
            eval=dataclasses.replace(mz.eval, episodes=8, assist_episodes=4, qa_episodes=0,
                                     assistance=False)))
