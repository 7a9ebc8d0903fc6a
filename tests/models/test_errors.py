"""Bad checkpoints and configs fail with errors that name the problem."""

import json
import shutil

import numpy as np
import pytest

from jaxtom import models
from jaxtom.models.hf_io import SafetensorsSource, _write_safetensors


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _rewrite(path, edit):
    file = path / "model.safetensors"
    src = SafetensorsSource([file])
    tensors = {n: np.array(src.read(n)) for n in src.names}
    edit(tensors)
    _write_safetensors(file, tensors)


def test_missing_tensor_is_named(tiny_checkpoints, tmp_path):
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")
    _rewrite(path, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(ValueError, match=r"missing tensors \['model.layers.1.mlp.up_proj.weight'"):
        models.from_pretrained(path)


def test_wrong_shape_is_named(tiny_checkpoints, tmp_path):
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")

    def edit(t):
        t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((8, 64), np.float32)
    _rewrite(path, edit)
    with pytest.raises(ValueError, match=r"k_proj.weight' has shape \(8, 64\), expected \(32, 64\)"):
        models.from_pretrained(path)


def test_unexpected_tensor_is_named(tiny_checkpoints, tmp_path):
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")
    _rewrite(path, lambda t: t.update({"model.extra.weight": np.zeros(3, np.float32)}))
    with pytest.raises(ValueError, match=r"unexpected tensors \['model.extra.weight'\]"):
        models.from_pretrained(path)


def test_unsupported_architecture(tiny_checkpoints, tmp_path):
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = ["MistralForCausalLM"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported architecture 'MistralForCausalLM'"):
        models.from_pretrained(path)


def test_unsupported_rope_type():
    with pytest.raises(ValueError, match="unsupported rope_type 'yarn'"):
        models.config_from_hf_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 8,
                                    "hidden_size": 8, "intermediate_size": 8,
                                    "num_hidden_layers": 1, "num_attention_heads": 2,
                                    "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})


def test_bad_heads_and_missing_paths(tmp_path):
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        models.ModelConfig(family="llama", vocab_size=8, hidden_size=8, intermediate_size=8,
                           num_layers=1, num_heads=3, num_kv_heads=2, head_dim=4)
    with pytest.raises(FileNotFoundError, match="neither a Hugging Face model directory"):
        models.from_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 8, "hidden_size": 8,
         "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2}))
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        models.from_pretrained(tmp_path / "empty")
