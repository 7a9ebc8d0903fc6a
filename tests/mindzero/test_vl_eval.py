"""`jaxtom eval` on an image-observation run (Qwen3-VL reading pictures): the goal table, the
accuracy plot, QA from the goal beliefs and the online assistance, end to end on a tiny
random VL policy, against the same run evaluated through the text path. The rows that do not
depend on the model (exact posterior, its top-N, random goal, uniform, and the BIP, oracle
and random helpers) must agree to the digit; the model's rows must exist, be finite, and
count the vision tower in their TFLOPs."""

import dataclasses

import jax
import numpy as np
import pytest

from jaxtom import flops
from jaxtom.config import load_config
from jaxtom.mindzero import goals_text
from jaxtom.models.orbax_io import save_model
from jaxtom.mindzero.observation import HostEpisodes
from jaxtom.mindzero.goals_eval import evaluate_run
from jaxtom.mindzero.vl_eval import VLQueries, load_vl_model
from jaxtom.mindzero.vl_train import build_vl_model

EVAL = ["mindzero.eval.episodes=3", "mindzero.eval.stride=6", "mindzero.eval.assistance=true",
        "mindzero.eval.assist_episodes=2", "mindzero.eval.seeds=[10]",
        "mindzero.eval.qa_episodes=2", "trainer.max_new_tokens=12"]


def _saved_run(cfg, run_dir, build):
    """A run directory holding a model's checkpoint and its tokenizer, as training leaves."""
    train, test = goals_text.make_episodes(cfg)
    views = (HostEpisodes.from_episodes(train), HostEpisodes.from_episodes(test))
    model, _ = build(cfg, run_dir, views=views)
    save_model(model, run_dir / "checkpoint")
    return run_dir / "checkpoint"


@pytest.mark.slow
def test_image_run_evaluates_like_the_text_path(tmp_path):
    vl_cfg = load_config("configs/mindzero_gridworld_qwen3vl_tiny.py", EVAL)
    text_cfg = load_config("configs/mindzero_gridworld_tiny.py", EVAL + [
        "mindzero.data.train_episodes=40", "mindzero.data.eval_episodes=8",
        "mindzero.data.val_episodes=0",
        f"mindzero.data.num_particles={vl_cfg.mindzero.data.num_particles}"])
    assert dataclasses.asdict(vl_cfg.mindzero.eval) == dataclasses.asdict(text_cfg.mindzero.eval)
    vl_ckpt = _saved_run(vl_cfg, tmp_path / "vl", build_vl_model)
    text_ckpt = _saved_run(text_cfg, tmp_path / "text", goals_text.build_model)
    vl = evaluate_run(vl_cfg, vl_ckpt, progress=False)
    text = evaluate_run(text_cfg, text_ckpt, progress=False)

    assert vl["queries"] == text["queries"] > 0
    for name in ("exact posterior", "exact posterior top-2", "random goal", "uniform"):
        for key in ("top1", "log_score", "brier", "kl_exact"):
            assert vl["goal_inference"][name][key] == text["goal_inference"][name][key], name
    for name in ("random goal", "exact posterior (BIP)", "oracle"):
        assert vl["assistance"][name] == text["assistance"][name], name
    for name in ("random goal", "exact posterior"):
        assert vl["qa"]["accuracy"][name] == text["qa"]["accuracy"][name], name
    assert vl["qa"]["accuracy"]["exact posterior"]["overall"] == 1.0

    row = vl["goal_inference"]["MindZero"]
    assert all(np.isfinite(row[k]) for k in ("top1", "log_score", "kl_exact"))
    assert np.isfinite(vl["assistance"]["MindZero"]["speedup"])
    assert (tmp_path / "vl" / "goal_accuracy.png").stat().st_size > 0
    assert "MindZero" in (tmp_path / "vl" / "results.md").read_text()

    # TFLOPs per query: the decoder over every token plus the vision tower over the patches
    model, codec = load_vl_model(vl_cfg, vl_ckpt)
    queries = VLQueries(model, codec, vl_cfg.mindzero.data.image_cell_size,
                        vl_cfg.mindzero.data.image_style, 2)
    view = HostEpisodes.from_episodes(goals_text.make_episodes(vl_cfg)[1])
    texts, tokens = queries.ask(view, [(0, 1), (1, 2)], key=jax.random.key(0),
                                temperature=0.0, max_new_tokens=4)
    assert len(texts) == 2 and (tokens > queries.patches // 4).all()  # image tokens counted
    cfg = model.config
    expected = 2 * (cfg.text.num_params() * row["tokens_per_query"]
                    + cfg.vision.num_params() * queries.patches) / 1e12
    assert row["tflops_per_query"] == pytest.approx(expected, rel=1e-9)
    assert row["tflops_per_query"] > flops.inference_tflops(cfg.text.num_params(),
                                                            row["tokens_per_query"])
