"""Update-step memory against row length at real model shapes: jaxtom vs tunix, compiled only.

No weights are needed: each side's GRPO update step (forward, backward, clip, AdamW) is
compiled for abstract parameters of Qwen3-0.6B / 4B / 8B shapes and one row of 1k / 4k / 16k
tokens (half prompt, half completion), float32 master weights and bfloat16 compute on both
sides, on one device. The figure is XLA's memory analysis of the compiled program (peak =
arguments + outputs - donated + temporaries, the number `jaxtom plan` reports). tunix is
configured as its competent user would for long rows: its decoder layers rematerialised
(`RematConfig.DECODER`); its flash attention is a TPU Pallas kernel and is left off on CPU.
jaxtom runs its defaults (`ModelConfig.remat` "auto", `ModelConfig.attention` "auto":
blockwise beyond 2,048 tokens).

    .venv-bench/bin/python benchmarks/memory_curves.py [--shapes 0.6b,4b,8b --rows 1024,4096,16384]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from jaxtom.plan import xla_memory  # noqa: E402
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

# Hugging Face config.json fields of the three Qwen3 shapes (vocabulary 151,936)
SHAPES = {
    "0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 tie_word_embeddings=True),
    "4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=False),
}
VOCAB = 151_936
ROPE_THETA = 1_000_000.0


def jaxtom_step_memory(shape: dict, T: int) -> dict:
    """XLA memory of jaxtom's update step (the program `Learner.update` runs) on one row."""
    from jaxtom.config import Config, ModelSection, TrainerConfig
    from jaxtom.models.config import ModelConfig
    from jaxtom.parallel import make_mesh
    from jaxtom.plan import plan_update
    from jaxtom.rl import StepConfig

    mcfg = ModelConfig(family="qwen3", vocab_size=VOCAB, hidden_size=shape["hidden_size"],
                       intermediate_size=shape["intermediate_size"],
                       num_layers=shape["num_hidden_layers"],
                       num_heads=shape["num_attention_heads"],
                       num_kv_heads=shape["num_key_value_heads"], head_dim=shape["head_dim"],
                       rope_theta=ROPE_THETA, qk_norm=True,
                       tie_word_embeddings=shape["tie_word_embeddings"],
                       param_dtype="float32", compute_dtype="bfloat16")
    config = Config(model=ModelSection(family="qwen3"),
                    step=StepConfig(reference="batch", kl_coef=0.01, max_grad_norm=1.0),
                    trainer=TrainerConfig(num_rows=1, row_len=T, prompts_per_step=1,
                                          group_size=1))
    mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
    start = time.perf_counter()
    update = plan_update(config, mcfg, mesh)
    return dict(update["xla"], compile_seconds=time.perf_counter() - start)


def tunix_step_memory(shape: dict, T: int) -> dict:
    """XLA memory of tunix's GRPO loss + AdamW update (as benchmarks/grpo_step.py runs it)."""
    import optax
    from flax import nnx
    from tunix.models.qwen3 import model as qwen3_model
    from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample

    cfg = qwen3_model.ModelConfig(
        num_layers=shape["num_hidden_layers"], vocab_size=VOCAB,
        embed_dim=shape["hidden_size"], hidden_dim=shape["intermediate_size"],
        num_heads=shape["num_attention_heads"], head_dim=shape["head_dim"],
        num_kv_heads=shape["num_key_value_heads"], rope_theta=int(ROPE_THETA), norm_eps=1e-6,
        use_tied_embedding=shape["tie_word_embeddings"],
        remat_config=qwen3_model.RematConfig.DECODER, dtype=jnp.bfloat16,
        param_dtype=jnp.float32)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-6, weight_decay=0.01))

    def build():
        model = qwen3_model.Qwen3(cfg, rngs=nnx.Rngs(0))
        return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

    abstract = nnx.eval_shape(build)
    graphdef, state = nnx.split(abstract)
    algo = GRPOConfig(beta=0.01, epsilon=0.2, num_generations=2, loss_agg_mode="token-mean",
                      kl_loss_mode="low_var_kl", kl_clamp_value=10.0)
    if not hasattr(algo, "temperature"):
        algo.temperature = 1.0
    P = C = T // 2
    sds = jax.ShapeDtypeStruct
    example = TrainExample(
        prompt_ids=sds((1, P), jnp.int32), prompt_mask=sds((1, P), jnp.bool_),
        completion_ids=sds((1, C), jnp.int32), completion_mask=sds((1, C), jnp.int32),
        advantages=sds((1,), jnp.float32), ref_per_token_logps=sds((1, C), jnp.float32),
        old_per_token_logps=None)

    from grpo_step import tunix_train_step  # the step benchmarks/grpo_step.py times

    start = time.perf_counter()
    compiled = jax.jit(tunix_train_step(graphdef, algo), donate_argnums=0).lower(
        state, example).compile()
    return dict(xla_memory(compiled), compile_seconds=time.perf_counter() - start)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="0.6b,4b,8b")
    parser.add_argument("--rows", default="1024,4096,16384", help="row lengths in tokens")
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("memory_curves")
    try:
        import tunix  # noqa: F401
        with_tunix = True
    except ImportError:
        with_tunix = False
    gib = 2.0 ** 30
    result: dict = {"backend": jax.default_backend(), "memory": "XLA peak = arguments + "
                    "outputs - aliased + temporaries, one device, one row", "curves": {}}
    print(f"{'shape':6s} {'row':>6s} {'jaxtom GiB':>11s} {'(temps)':>9s} {'tunix GiB':>10s} "
          f"{'(temps)':>9s} {'ratio':>6s}")
    for name in args.shapes.split(","):
        for T in (int(t) for t in args.rows.split(",")):
            ours = jaxtom_step_memory(SHAPES[name], T)
            theirs = tunix_step_memory(SHAPES[name], T) if with_tunix else None
            entry = {"jaxtom": ours, "tunix": theirs}
            line = (f"{name:6s} {T:6d} {ours['peak'] / gib:11.2f} "
                    f"{ours['temporaries'] / gib:9.2f}")
            if theirs:
                entry["ratio_vs_tunix"] = theirs["peak"] / ours["peak"]
                line += (f" {theirs['peak'] / gib:10.2f} {theirs['temporaries'] / gib:9.2f} "
                         f"{entry['ratio_vs_tunix']:6.2f}")
            print(line, flush=True)
            result["curves"][f"{name}_{T}"] = entry
    rows = sorted(int(t) for t in args.rows.split(","))
    if "4b" in args.shapes.split(",") and len(rows) > 1:
        a, b = (result["curves"][f"4b_{t}"]["jaxtom"]["temporaries"] for t in rows[-2:])
        result["jaxtom_4b_temporaries_growth"] = b / a  # linear: ~ the row-length ratio
        result["row_length_ratio"] = rows[-1] / rows[-2]
        if with_tunix:
            result["memory_ratio_vs_tunix_4b_longest"] = (
                result["curves"][f"4b_{rows[-1]}"]["ratio_vs_tunix"])
    if not with_tunix:
        print("tunix not installed: only jaxtom was measured")
    record.emit(result, save=args.save)
    return result


if __name__ == "__main__":
    main()
