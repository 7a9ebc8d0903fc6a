"""GRPO update-step time and peak memory: jaxtom's Learner vs tunix's GRPO loss + optimizer.

Both sides train the same random Qwen3 checkpoint (written by transformers) on the same
batch: 8 sequences of a 32-token prompt + 64 sampled tokens, on-policy, reference log-probs
given, KL coefficient 0.01, clip 0.2, global-norm clip 1.0, AdamW. tunix's side is what its
GRPOLearner's trainer runs per step: `grpo_loss_fn` under `nnx.value_and_grad`, then
`nnx.Optimizer.update`, here as one `jax.jit` of the split model and optimizer state with the
state donated (as jaxtom's update donates its state), which also spares tunix the per-call
Python graph traversal of `nnx.jit`.

Two models: the tiny one (vocab 2048) for step time (`speedup_vs_tunix`), and one with
Qwen3's real vocabulary (151,936, tied embeddings as in Qwen3-0.6B to 4B) but a small body, so
that it runs on a CPU, for memory (`memory_ratio_vs_tunix`). Memory is XLA's analysis of each
side's compiled step: peak = arguments + outputs - donated (aliased) + temporaries, the bytes
its buffers take at most at once. Time is the median of repeats after a warm-up (compilation
excluded); the two sides' repeats alternate, so load from other processes on a shared
machine hits both alike. tunix is optional: without it only jaxtom is measured.

    python benchmarks/grpo_step.py                      # jaxtom only (main venv)
    python -m venv .venv-bench && .venv-bench/bin/pip install -e ".[bench]"
    .venv-bench/bin/python benchmarks/grpo_step.py      # + tunix (its own venv)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxtom.plan import xla_memory  # noqa: E402  (the figure `jaxtom plan` reports)

TINY = dict(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=512, initializer_range=0.05)
QWEN3_VOCAB = dict(TINY, vocab_size=151_936, hidden_size=64, intermediate_size=192,
                   num_hidden_layers=2, head_dim=16, tie_word_embeddings=True)
BATCH, PROMPT, COMPLETION = 8, 32, 64


def make_data(vocab, seed=0):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, vocab, (BATCH, PROMPT)).astype(np.int32)
    completion = rng.integers(1, vocab, (BATCH, COMPLETION)).astype(np.int32)
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


def run_jaxtom(path, data):
    """jaxtom's compiled update step: (warmed-up zero-argument callable, XLA memory)."""
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
    compiled = learner.program(box["state"], batch).lower(box["state"], batch).compile()

    def step():
        box["state"], metrics = compiled(box["state"], batch)
        jax.block_until_ready(metrics)

    step()  # warm-up
    return step, xla_memory(compiled)


def run_tunix(path, data):
    """tunix's GRPO loss + optimizer update, compiled: (warmed-up callable, XLA memory)."""
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
    graphdef, state = nnx.split((model, optimizer))

    def train_step(state, example):
        model, optimizer = nnx.merge(graphdef, state)

        def loss(m):
            out = algo_core.grpo_loss_fn(m, example, algo, pad_id=0, eos_id=-1)
            return out[0] if isinstance(out, tuple) else out

        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), value

    compiled = jax.jit(train_step, donate_argnums=0).lower(state, example).compile()
    box = {"state": state}

    def step():
        box["state"], value = compiled(box["state"], example)
        jax.block_until_ready(value)

    step()  # warm-up
    return step, xla_memory(compiled)


def side_by_side(sizes, repeats, with_tunix):
    """(jaxtom (seconds, memory), tunix (seconds, memory) or None) on one model."""
    from jaxtom.models.tiny import save_tiny_hf

    path = Path(tempfile.mkdtemp()) / "qwen3"
    save_tiny_hf(path, "qwen3", **sizes)
    data = make_data(sizes["vocab_size"])
    steps, memory = zip(*[run(path, data) for run in
                          ([run_jaxtom, run_tunix] if with_tunix else [run_jaxtom])])
    seconds = timed(steps, repeats)
    return list(zip(seconds, memory))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--vocab-repeats", type=int, default=3,
                        help="timed repeats on the Qwen3-vocabulary model")
    args = parser.parse_args()
    try:
        import tunix  # noqa: F401
        with_tunix = True
    except ImportError:
        with_tunix = False
    mb = 2**20
    result = {"batch": BATCH, "seq_len": PROMPT + COMPLETION, "completion": COMPLETION,
              "backend": jax.default_backend(), "memory": "XLA peak = arguments + outputs - "
              "aliased + temporaries"}
    for name, sizes, repeats in (("tiny", TINY, args.repeats),
                                 ("qwen3_vocab", QWEN3_VOCAB, args.vocab_repeats)):
        sides = side_by_side(sizes, repeats, with_tunix)
        print(f"{name} (vocab {sizes['vocab_size']}, d={sizes['hidden_size']}, "
              f"{sizes['num_hidden_layers']} layers), batch {BATCH} x {PROMPT}+{COMPLETION}:")
        for side, (s, m) in zip(("jaxtom", "tunix"), sides):
            print(f"  {side:6s} step {s * 1e3:8.1f} ms   peak {m['peak'] / mb:8.1f} MiB "
                  f"(arguments {m['arguments'] / mb:.1f}, outputs {m['outputs'] / mb:.1f}, "
                  f"aliased {m['aliased'] / mb:.1f}, temporaries {m['temporaries'] / mb:.1f})")
            result[f"{name}_{side}_step_s"] = s
            result[f"{name}_{side}_memory"] = m
        if len(sides) == 2:
            (js, jm), (ts, tm) = sides
            result[f"{name}_speedup_vs_tunix"] = ts / js
            result[f"{name}_memory_ratio_vs_tunix"] = tm["peak"] / jm["peak"]
            print(f"  jaxtom: {ts / js:.2f}x tunix's speed, {tm['peak'] / jm['peak']:.2f}x less "
                  f"peak memory")
    if with_tunix:
        result["speedup_vs_tunix"] = result["tiny_speedup_vs_tunix"]  # target >= 2
        result["memory_ratio_vs_tunix"] = result["qwen3_vocab_memory_ratio_vs_tunix"]  # >= 3
        print(f"speedup_vs_tunix {result['speedup_vs_tunix']:.2f} (tiny model, target >= 2), "
              f"memory_ratio_vs_tunix {result['memory_ratio_vs_tunix']:.2f} (Qwen3 vocabulary, "
              f"target >= 3)")
    else:
        print("tunix not installed: only jaxtom was measured (install the bench extra in a "
              "separate venv to compare)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
