"""`jaxtom plan` on the Qwen3-VL gridworld configs: the model's config.json is a Qwen3-VL one
(`Qwen3VLForConditionalGeneration`), so the plan builds the VL model (vision tower counted
and trained unless `step.freeze_vision`), an update batch of image+text rows (one picture of
the configured size per row, M-RoPE positions) and plans the rollout's decode on the text
decoder. Runs in a subprocess like tests/test_plan.py's."""

import json
import math

import pytest

from jaxtom.models.config import ModelConfig
from jaxtom.models.vl_config import VisionConfig, VLConfig, load_vl_config, vl_config_to_hf_dict
from tests.test_plan import ROOT, plan_json

VL_4B = str(ROOT / "configs" / "mindzero_gridworld_qwen3vl_4b.py")
VL_4B_DIR = ROOT / "launch" / "models" / "Qwen3-VL-4B-Instruct"  # shipped, shapes only


@pytest.fixture(scope="module")
def tiny_vl_dir(tmp_path_factory):
    """A tiny Qwen3-VL config.json whose projections all divide by 8 (fsdp 8 shards them)."""
    text = ModelConfig(family="qwen3", vocab_size=512, hidden_size=64, intermediate_size=128,
                       num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
                       max_position_embeddings=4096, tie_word_embeddings=True,
                       eos_token_ids=(7,))
    vision = VisionConfig(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                          out_hidden_size=64, num_position_embeddings=64,
                          deepstack_visual_indexes=(0, 1))
    cfg = VLConfig(text=text, vision=vision, image_token_id=500, vision_start_token_id=501,
                   vision_end_token_id=502, mrope_section=(4, 2, 2))
    d = tmp_path_factory.mktemp("tiny_vl")
    (d / "config.json").write_text(json.dumps(vl_config_to_hf_dict(cfg)))
    return d


COMMON = ("trainer.prompts_per_step=2", "trainer.group_size=4", "trainer.row_len=320",
          "trainer.max_new_tokens=16", "step.micro_batches=1", "step.ppo_mini_batches=1",
          "mindzero.data.image_cell_size=16")


@pytest.mark.slow  # ~90 s on 2 cores; paid for the default suite's multi-process paper-config runs
def test_tiny_vl_plan_counts_the_vision_tower(tiny_vl_dir):
    result = plan_json(VL_4B, f"model.path={tiny_vl_dir}", *COMMON)
    cfg = load_vl_config(tiny_vl_dir)
    m = result["model"]
    assert m["architecture"] == "Qwen3VLForConditionalGeneration"
    assert m["params"] == cfg.num_params() == m["trainable_params"]
    assert m["vision_params"] == cfg.vision.num_params() > 0
    # 160x160 px pictures upscale to 256x256: 16x16 patches, one picture per row
    assert m["image_patches"] == 256
    u = result["update"]
    assert result["mesh"]["devices"] == 8 and u["rows"] == 8 and u["row_len"] == 320
    # the batch holds each row's picture: float32 patches [1, 1, 256, 1536] per device
    assert u["memory"]["batch"] >= 256 * cfg.vision.patch_dim * 4
    # fp32 params: every trainable parameter once in params, twice in Adam's moments
    assert u["memory"]["optimizer_state"] >= 2 * u["memory"]["params"]
    assert result["per_device_peak_bytes"] >= u["xla"]["peak"] > 0
    assert result["rollout"]["rows"] == 8
    # a MindZero run keeps the model it started from: its trained params, on top of the peaks
    kept = result["resident"]["init_state"]["start_model"]
    assert kept == u["memory"]["params"] == u["kept_start_model"]
    assert result["per_device_peak_bytes"] >= u["xla"]["peak"] + kept


@pytest.mark.slow  # a second plan compile (~1 min on 2 busy cores)
def test_frozen_vision_plan_trains_the_text_side_only(tiny_vl_dir):
    result = plan_json(VL_4B, f"model.path={tiny_vl_dir}", *COMMON, "step.freeze_vision=true",
                       "--no-rollout")
    cfg = load_vl_config(tiny_vl_dir)
    assert result["model"]["params"] == cfg.num_params()
    assert result["model"]["trainable_params"] == cfg.text.num_params()


@pytest.mark.slow  # compiles the 4B update on 8 simulated devices: minutes on 2 cores
def test_qwen3_vl_4b_gridworld_plan_from_config_json():
    """The acceptance plan: Qwen3-VL-4B from the shipped config.json on one 8-device host."""
    result = plan_json(VL_4B, f"model.path={VL_4B_DIR}")
    cfg = load_vl_config(VL_4B_DIR)
    m = result["model"]
    assert result["mesh"]["devices"] == 8
    assert m["params"] == cfg.num_params() == m["trainable_params"]
    assert 4.0e9 < m["params"] < 5.0e9 and 3.5e8 < m["vision_params"] < 4.5e8
    assert m["image_patches"] == 1024  # 500x500 px -> 512x512 -> 32x32 patches
    # fp32 params + Adam moments + reference copy, fsdp over 8 devices
    assert result["update"]["memory"]["train_state"] >= 16 * m["params"] / 8 * 0.99
    assert result["per_device_peak_bytes"] > result["update"]["memory"]["train_state"]
    assert math.isfinite(result["flops_per_rollout_step"]["update_total"])


def test_vl_paper_configs_read_images_at_paper_settings():
    """The Qwen3-VL paper configs are the text paper configs with the image observation."""
    from jaxtom.config import config_module
    for size in ("4b", "8b"):  # (not validated: the checkpoints are not here)
        vl = config_module(str(ROOT / "configs" / f"mindzero_gridworld_qwen3vl_{size}.py")
                           ).get_config()
        text = config_module(str(ROOT / "configs" / f"mindzero_gridworld_qwen3_{size}.py")
                             ).get_config()
        assert vl.mindzero.data.observation == "image" and vl.mindzero.data.image_cell_size == 50
        assert text.mindzero.data.observation == "figure"
        assert vl.step == text.step and vl.mesh == text.mesh
        assert vl.model.path.endswith(f"Qwen3-VL-{size[0]}B-Instruct")
