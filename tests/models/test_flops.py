"""FLOPs helper: parameter counts equal the real parameter arrays; eq. 6 of MindZero."""

import numpy as np
import pytest
from flax import nnx

from jaxtom import flops, models


@pytest.mark.parametrize("name", ["qwen3-gqa", "llama-mqa-tied-bias"])
def test_active_params_counts_every_array(tiny_checkpoints, name):
    model = models.from_pretrained(tiny_checkpoints[name][0])
    n = sum(int(np.prod(v.get_value().shape))
            for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert flops.active_params(model) == n
    torch_n = sum(p.numel() for p in tiny_checkpoints[name][1].parameters())
    assert flops.active_params(model.config) == torch_n


def test_paper_formula():
    # Qwen3-8B-sized model over 1,000 tokens: 2 * 8e9 * 1e3 = 16 TFLOPs
    assert flops.inference_tflops(8e9, 1000) == pytest.approx(16.0)
    with pytest.raises(ValueError):
        flops.inference_flops(-1, 5)
    with pytest.raises(TypeError):
        flops.active_params("qwen")
