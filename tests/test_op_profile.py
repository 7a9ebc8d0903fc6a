"""`benchmarks/op_profile.py` splits a profiled program's op time by the decoder's named
scopes: a training forward's compiled ops must carry them, and the profile must find the
program's ops and account for their time."""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom.models.config import ModelConfig
from jaxtom.models.decoder import Decoder

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "op_profile.py"
_SPEC = importlib.util.spec_from_file_location("op_profile", _PATH)
op_profile = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(op_profile)

CFG = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8)


def test_a_training_forward_and_backward_split_by_scope():
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 48)), jnp.int32)

    @jax.jit
    def loss_and_grad(params, tokens):
        def loss(params):
            logits = nnx.merge(graphdef, params)(tokens)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 0])
        return jax.value_and_grad(loss)(params)

    scopes = op_profile.op_scopes(loss_and_grad.lower(params, tokens).compile().as_text())
    assert {"attention", "qkv", "mlp"} <= set(scopes.values())
    result = op_profile.scope_times(loss_and_grad, lambda: (params, tokens), repeats=1)
    assert result["op_ms"]["attention"] > 0 and result["op_ms"]["mlp"] > 0
    assert abs(sum(result["share"].values()) - 1.0) < 0.01
