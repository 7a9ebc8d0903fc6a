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


def _header_len(file) -> int:
    return int.from_bytes(file.read_bytes()[:8], "little")


def test_truncated_safetensors_names_file_and_tensor(tiny_checkpoints, tmp_path):
    """A file cut in half used to fail inside numpy ('cannot reshape array of size 0')."""
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")
    file = path / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError) as err:
        models.from_pretrained(path)
    msg = str(err.value)
    assert str(file) in msg and "truncated or damaged checkpoint" in msg, msg
    assert f"but the file has {len(data) // 2} bytes" in msg, msg
    assert "tensor 'model." in msg and "needs bytes [" in msg, msg
    assert "\n" not in msg


def test_garbled_safetensors_header(tiny_checkpoints, tmp_path):
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")
    file = path / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[8:24] = b"#" * 16  # the JSON header's first bytes
    file.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model.safetensors: garbled safetensors header"):
        models.from_pretrained(path)
    # a header length beyond the file
    file.write_bytes((10**9).to_bytes(8, "little") + bytes(data[8:]))
    with pytest.raises(ValueError, match=r"header claims 1000000000 bytes but the file has"):
        models.from_pretrained(path)
    file.write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match=r"2 bytes is too short for a safetensors header"):
        models.from_pretrained(path)


def test_offsets_that_disagree_with_shape(tiny_checkpoints, tmp_path):
    path = _copy(tiny_checkpoints["qwen3-gqa"][0], tmp_path / "m")
    file = path / "model.safetensors"
    data = file.read_bytes()
    n = _header_len(file)
    header = json.loads(data[8:8 + n])
    name = "model.layers.0.self_attn.q_proj.weight"
    a, b = header[name]["data_offsets"]
    header[name]["data_offsets"] = [a, b - 4]
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (n - len(blob))
    assert len(blob) == n
    file.write_bytes(data[:8] + blob + data[8 + n:])
    with pytest.raises(ValueError, match=rf"tensor '{name}' of shape .* needs \d+ bytes but its "
                                         r"data_offsets"):
        models.from_pretrained(path)
