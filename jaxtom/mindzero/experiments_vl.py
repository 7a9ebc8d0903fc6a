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
        step=dataclasses.replace(cfg.step, warmup_steps=0,
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


def cpu_vl_config() -> Config:
    """The CPU image default: a from-scratch Qwen3-VL that reads the grid and is trained by
    SSRL within the CPU budget.

    The picture is the flat cells at 32 px (`image_style="cells_ranked"`: the partner the
    human's path has ranked ahead is outlined, the picture's version of the text default's
    `>`) under one short line (`image_short`). A 96-wide 3-layer decoder (no q/k norm, init
    0.1) with the 2-block tower is warmed up for 500 steps: 250 reading the lead's name,
    then the `pictured` teacher's seven hypotheses, the lead with every other object (the
    outlined partner first, the rest in label order), at random probabilities sorted either
    way where a partner is outlined; half those rows are the answer's opening only. With
    every partner named, the true goal is among the hypotheses wherever the lead is read,
    and what is left to SSRL is the mass, which the ELBO sets (uniform over partners while
    the path has not told them apart, the outlined partner after).

    SSRL then holds the vision tower (`step.freeze_vision`) and the answer's structure
    (temperature 0.1, each probability digit explored at 3.0) and moves the probabilities
    at lr 5e-5 with a KL of 0.05 to the warm-up for 100 steps of 8 pictures x 8 samples,
    repeated pairs merged; the low learning rate and temperature keep SSRL from unlearning
    the reading of the lead. Held-out: 100 episodes at stride 2, greedy answers; no
    assistance rows (the goal table is the claim here)."""
    cfg = tiny_vl_config()
    mz = cfg.mindzero
    return dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, hidden_size=96, intermediate_size=256,
                                  num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24,
                                  qk_norm=False, vocab_size=1024, initializer_range=0.1),
        step=dataclasses.replace(cfg.step, learning_rate=5e-5, warmup_steps=10, kl_coef=0.05,
                                 freeze_vision=True),
        trainer=dataclasses.replace(cfg.trainer, workdir="runs/mindzero_gridworld_qwen3vl_cpu",
                                    total_steps=100, prompts_per_step=8, group_size=8,
                                    temperature=0.1, max_new_tokens=96, eval_every=50,
                                    checkpoint_every=50),
        mindzero=dataclasses.replace(
            mz,
            data=dataclasses.replace(mz.data, observation="image_short", image_cell_size=32,
                                     image_style="cells_ranked", num_particles=7,
                                     train_episodes=200, eval_episodes=100),
            warmup=dataclasses.replace(mz.warmup, steps=500, read_steps=250, read_share=0.5,
                                       batch_size=32, learning_rate=1e-3, teacher="pictured",
                                       evidence_order="either"),
            reward=dataclasses.replace(mz.reward, duplicates="merge"),
            eval=dataclasses.replace(mz.eval, episodes=100, stride=2)))
