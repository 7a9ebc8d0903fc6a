"""GRPO update-step time and peak memory: jaxtom's Learner vs tunix's GRPO loss + optimizer.

Both sides train the same tiny random Qwen3 checkpoint (written by transformers) on the same
batch: 8 sequences of a 32-token prompt + 64 sampled tokens, on-policy, reference log-probs
given, KL coefficient 0.01, clip 0.2, global-norm clip 1.0, AdamW. tunix's side is what its
GRPOLearner's trainer runs per step: `grpo_loss_fn` under `nnx.value_and_grad`, then
`nnx.Optimizer.update`, in one `nnx.jit`. Median of repeats after a warm-up (compilation
excluded); the two sides' repeats alternate, so load from other processes on a shared machine
hits both alike. tunix is optional: without it only jaxtom is measured, and the script says so.

    python benchmarks/grpo_step.py                      # jaxtom only (main venv)
    python -m venv .venv-bench && .venv-bench/bin/pip install -e ".[bench]"
    .venv-bench/bin/python benchmarks/grpo_step.py      # + tunix (its own venv)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = dict(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             max_position_embeddings=512, initializer_range=0.05)
BATCH, PROMPT, COMPLETION = 8, 32, 64


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, SIZES["vocab_size"], (BATCH, PROMPT)).astype(np.int32)
    completion = rng.integers(1, SIZES["vocab_size"], (BATCH, COMPLETION)).astype(np.int32)
    adv = rng.normal(size=BATCH).astype(np.float32)
    ref = (-rng.exponential(7.0, (BATCH, COMPLETION))).astype(np.float32)
    return prompt, completion, adv, ref


def timed(fns, repeats):
    """Median seconds per call of each already warmed-up callable, their calls interleaved."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_jaxtom(path, data):
    """jaxtom's update step as a warmed-up (compiled) zero-argument callable."""
    from jaxtom import models, rl

    prompt, completion, adv, ref = data
    model = models.from_pretrained(path)
    learner = rl.Learner(model, rl.StepConfig(reference="batch", kl_coef=0.01, max_grad_norm=1.0,
                                              learning_rate=1e-6, weight_decay=0.01))
    tokens = np.concatenate([prompt, completion], 1)
    T = tokens.shape[1]
    mask = np.zeros((BATCH, T), np.float32)
    mask[:, PROMPT:] = 1.0
    ref_full = np.zeros((BATCH, T), np.float32)
    ref_full[:, PROMPT:] = ref
    batch = rl.Batch(tokens=tokens, positions=np.broadcast_to(np.arange(T), tokens.shape).copy(),
                     segment_ids=np.ones_like(tokens), policy_mask=mask,
                     advantages=np.repeat(adv[:, None], T, 1), group_ids=np.zeros_like(tokens),
                     ref_logp=ref_full)
    batch = learner.put_batch(batch)
    box = {"state": learner.init_state(model)}

    def step():
        box["state"], metrics = learner.step(box["state"], batch)
        jax.block_until_ready(metrics)

    step()  # compile + warm-up
    return step


def run_tunix(path, data):
    """tunix's GRPO loss + optimizer update as a warmed-up zero-argument callable."""
    import optax
    from flax import nnx
    from tunix.rl import algo_core
    from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample
    from tunix.models.qwen3 import model as qwen3_model
    from tunix.models.qwen3 import params as qwen3_params

    hf = json.loads((Path(path) / "config.json").read_text())
    rope = hf.get("rope_parameters") or {}
    cfg = qwen3_model.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"], head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"],
        rope_theta=int(rope.get("rope_theta", hf.get("rope_theta", 10000))),
        norm_eps=hf["rms_norm_eps"], use_tied_embedding=hf["tie_word_embeddings"])
    model = qwen3_params.create_model_from_safe_tensors(str(path), cfg)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-6, weight_decay=0.01))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    algo = GRPOConfig(beta=0.01, epsilon=0.2, num_generations=2)
    if not hasattr(algo, "temperature"):  # set from the rollout config inside GRPOLearner
        algo.temperature = 1.0
    prompt, completion, adv, ref = data
    example = TrainExample(
        prompt_ids=jnp.asarray(prompt), prompt_mask=jnp.ones_like(prompt, dtype=bool),
        completion_ids=jnp.asarray(completion),
        completion_mask=jnp.ones_like(completion, dtype=jnp.int32),
        advantages=jnp.asarray(adv), ref_per_token_logps=jnp.asarray(ref),
        old_per_token_logps=None)

    @nnx.jit
    def train_step(model, optimizer, example):
        def loss(m):
            out = algo_core.grpo_loss_fn(m, example, algo, pad_id=0, eos_id=-1)
            return out[0] if isinstance(out, tuple) else out
        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return value

    def step():
        jax.block_until_ready(train_step(model, optimizer, example))

    step()  # compile + warm-up
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    from jaxtom.models.tiny import save_tiny_hf

    path = Path(tempfile.mkdtemp()) / "qwen3"
    save_tiny_hf(path, "qwen3", **SIZES)
    data = make_data()
    jaxtom_step = run_jaxtom(path, data)
    rss = peak_rss_mb()  # before tunix allocates anything
    try:
        import tunix  # noqa: F401
    except ImportError:
        tunix_step = None
    else:
        tunix_step = run_tunix(path, data)
    jaxtom_s, *tunix_s = timed([jaxtom_step] + ([tunix_step] if tunix_step else []),
                               args.repeats)
    print(f"jaxtom GRPO step: {jaxtom_s * 1e3:.1f} ms (batch {BATCH} x {PROMPT}+{COMPLETION} "
          f"tokens), peak RSS {rss:.0f} MB")
    result = {"step_s": jaxtom_s, "peak_rss_mb": rss, "batch": BATCH,
              "seq_len": PROMPT + COMPLETION, "backend": jax.default_backend()}
    if tunix_step is None:
        print("tunix not installed: only jaxtom was measured (install the bench extra in a "
              "separate venv to compare)")
    else:
        tunix_s = tunix_s[0]
        result.update(tunix_step_s=tunix_s, speedup_vs_tunix=tunix_s / jaxtom_s,
                      peak_rss_mb_both=peak_rss_mb())
        print(f"tunix GRPO step:  {tunix_s * 1e3:.1f} ms -> jaxtom is "
              f"{tunix_s / jaxtom_s:.2f}x tunix's speed (target >= 2x)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
