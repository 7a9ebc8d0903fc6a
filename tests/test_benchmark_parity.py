"""The same-model check every peer benchmark runs before timing (`benchmarks/parity.py`): on
one checkpoint jaxtom's and transformers' teacher-forced float32 log-probs and gradient norms
agree far inside its 1e-3 bound, and a model that differs only in its RoPE base (what tunix's
Qwen3 silently did) fails it. tunix is not installed here; its side is the same code path."""

import importlib.util
import pathlib

import numpy as np
import pytest
from flax import nnx

from jaxtom import models
from jaxtom.models.tiny import save_tiny_hf

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "parity.py"
_SPEC = importlib.util.spec_from_file_location("parity", _PATH)
parity = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(parity)


def test_same_model_passes_and_a_different_rope_base_fails(tmp_path):
    torch_model = save_tiny_hf(tmp_path / "qwen3", "qwen3", rope_theta=parity.ROPE_THETA)
    tokens = np.random.default_rng(0).integers(1, 256, (2, 48))
    ours = models.from_pretrained(tmp_path / "qwen3")
    theirs = parity.transformers_side(torch_model, tokens)
    same = parity.compare(parity.jaxtom_side(ours, tokens), theirs, "transformers")
    assert same["logprob_max_abs_diff"] < 1e-5 and same["grad_norm_rel_diff"] < 1e-5
    parity.check(same, "transformers")

    # the peer's bug, reproduced on our side: the config's RoPE base ignored
    graph_model = models.init_decoder(ours.config.replace(rope_theta=1e4), seed=0)
    wrong = nnx.merge(nnx.graphdef(graph_model), nnx.state(ours))
    other = parity.compare(parity.jaxtom_side(wrong, tokens), theirs, "transformers")
    assert other["logprob_max_abs_diff"] > parity.MAX_LOGPROB_DIFF
    with pytest.raises(SystemExit, match="different model"):
        parity.check(other, "transformers")
