"""GRPO update-step time and peak memory: jaxtom's Learner vs tunix's GRPO loss + optimizer.

Both sides train the same random Qwen3 checkpoint (written by transformers, RoPE base 1e6:
what tunix 0.1.7's Qwen3 computes with whatever its config says; `parity.py` checks the two
sides' teacher-forced log-probs and gradient norm agree before anything is timed) on the same
samples, on-policy, reference log-probs given, KL coefficient 0.01, clip 0.2, global-norm clip
1.0, AdamW, with the same objective (tunix set to jaxtom's token-mean aggregation and clamped
k3 KL; each side's first loss is printed). tunix's side is what its GRPOLearner's trainer runs
per step: `grpo_loss_fn` under `nnx.value_and_grad`, then `nnx.Optimizer.update`, here as one
`jax.jit` of the split model and optimizer state with the state donated (as jaxtom's update
donates its state), which also spares tunix the per-call Python graph traversal of `nnx.jit`.

Cases:
- the dense batch, 8 sequences of a 32-token prompt + 64 sampled tokens, on the tiny model
  (vocab 2048: `dense_speedup_vs_tunix`) and on one with Qwen3's real vocabulary (151,936, tied
  embeddings as in Qwen3-0.6B to 4B) but a small body, so that it runs on a CPU
  (`memory_ratio_vs_tunix`);
- GRPO-shaped batches on the tiny model: 8 samples in groups sharing a prompt, completions of
  sampled lengths, given to tunix padded as its learner pads them and to jaxtom as its
  trainer packs them (`trainer.share_prompts`); among them the two papers' shapes, scaled
  down: MindZero's (groups of 8 sharing a 256-token observation prompt) and CToM's (groups
  of 4 sharing a 512-token conversation). `speedup_vs_tunix` is the smaller of those two:
  the step on the batches the papers train on. The dense batch is not one (eight distinct
  prompts with one sample each have no group to be relative to); its figure is reported
  beside it as `dense_speedup_vs_tunix`.

Memory is XLA's analysis of each side's compiled step: peak = arguments + outputs - donated
(aliased) + temporaries, the bytes its buffers take at most at once. Time is the median of
repeats after a warm-up (compilation excluded); the two sides' repeats alternate, so load from
other processes on a shared machine hits both alike. tunix is optional: without it only
jaxtom is measured.

    python benchmarks/grpo_step.py                      # jaxtom only (main venv)
    python -m venv .venv-bench && .venv-bench/bin/pip install -e ".[bench]"
    .venv-bench/bin/python benchmarks/grpo_step.py      # + tunix (its own venv)
"""

from __future__ import annotations

import argparse
import json
import os
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
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

try:
    from benchmarks import parity  # noqa: E402
except ImportError:  # run as a script from benchmarks/
    import parity  # noqa: E402
ROPE_THETA = parity.ROPE_THETA

# rope_theta 1e6: what tunix's Qwen3 computes with whatever its config says (parity.py)
TINY = dict(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=1024, initializer_range=0.05, rope_theta=ROPE_THETA)
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


def grouped_data(vocab, group, prompt_len=PROMPT, seed=0):
    """A GRPO-shaped batch: BATCH samples in groups of `group` sharing a prompt of
    `prompt_len` tokens, completions of sampled lengths (8..COMPLETION tokens; the same
    lengths for every group size and prompt length).

    Arrays are [BATCH, prompt_len] and [BATCH, COMPLETION]; completion entries past a
    sample's length are 0 (padding), and `lengths` says how many are real."""
    _, completion, adv, ref = make_data(vocab, seed)
    prompt = np.random.default_rng(seed + 2).integers(1, vocab, (BATCH, prompt_len))
    prompt = np.repeat(prompt[::group], group, axis=0).astype(np.int32)
    lengths = np.random.default_rng(seed + 1).integers(8, COMPLETION + 1, BATCH)
    live = np.arange(COMPLETION)[None, :] < lengths[:, None]
    return prompt, np.where(live, completion, 0), adv, np.where(live, ref, 0.0), lengths


def timed(fns, repeats):
    """Median seconds per call of each already warmed-up callable, their calls interleaved."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def jaxtom_dense_batch(data):
    """One sequence per row, every completion token trained (the dense case)."""
    from jaxtom import rl

    prompt, completion, adv, ref = data
    tokens = np.concatenate([prompt, completion], 1)
    T = tokens.shape[1]
    mask = np.zeros((BATCH, T), np.float32)
    mask[:, PROMPT:] = 1.0
    ref_full = np.zeros((BATCH, T), np.float32)
    ref_full[:, PROMPT:] = ref
    return rl.Batch(tokens=tokens, positions=np.broadcast_to(np.arange(T), tokens.shape).copy(),
                    segment_ids=np.ones_like(tokens), policy_mask=mask,
                    advantages=np.repeat(adv[:, None], T, 1), group_ids=np.zeros_like(tokens),
                    ref_logp=ref_full)


def jaxtom_grouped_batch(data, group):
    """The batch jaxtom's trainer packs from these samples with `trainer.share_prompts`:
    each group's prompt once, then its completions (no padding past a completion's end),
    one group per row, rows a multiple of 64 tokens long (`pack_rollout`)."""
    from jaxtom.rl.batch import pack_shared_prompts
    from jaxtom.rl.trainer import Rollout, TrainerConfig, pack_rollout

    prompt, completion, adv, ref, lengths = data
    P = prompt.shape[1]
    seqs = [list(p) + list(c[:n]) for p, c, n in zip(prompt, completion, lengths)]
    masks = [[0.0] * P + [1.0] * int(n) for n in lengths]
    refs = [[0.0] * P + list(r[:n]) for r, n in zip(ref, lengths)]
    groups = [i // group for i in range(BATCH)]
    rollout = Rollout(sequences=seqs, policy_masks=masks, advantages=list(adv),
                      group_ids=groups, prompt_lens=[P] * BATCH)
    batch = pack_rollout(rollout, TrainerConfig(share_prompts=True))
    # the reference log-probs in the same layout (the packer places per-token lists that
    # travel with the tokens: its old_logps slot is used to carry them there)
    laid = pack_shared_prompts(seqs, masks, list(adv), groups, [P] * BATCH,
                               num_rows=batch.tokens.shape[0], row_len=batch.tokens.shape[1],
                               old_logps=refs)
    assert np.array_equal(laid.tokens, batch.tokens)
    return batch.replace(ref_logp=laid.old_logp)


def run_jaxtom(path, batch, every_position: bool = False):
    """jaxtom's compiled update step on `batch`: (warmed-up zero-argument callable, XLA
    memory, the first update's GRPO loss). `every_position` runs the LM head on every
    position, as tunix does, instead of the completion positions only: the same FLOPs as
    the peer, so a time ratio is a per-FLOP ratio."""
    from jaxtom import models, rl

    model = models.from_pretrained(path)
    learner = rl.Learner(model, rl.StepConfig(reference="batch", kl_coef=0.01, max_grad_norm=1.0,
                                              learning_rate=1e-6, weight_decay=0.01), total_steps=1000)
    batch = learner.put_batch(batch)
    box = {"state": learner.init_state(model)}
    compiled = learner.program(box["state"], batch, every_position=every_position).lower(
        box["state"], batch).compile()

    def step():
        box["state"], metrics = compiled(box["state"], batch)
        jax.block_until_ready(metrics)
        return float(metrics["loss_grpo"])

    return step, with_flops(compiled), step()  # the first call is also the warm-up


def tunix_train_step(graphdef, algo):
    """What tunix's GRPO learner runs per update: `grpo_loss_fn` under `nnx.value_and_grad`,
    then `nnx.Optimizer.update`, on the split (model, optimizer) state."""
    from flax import nnx
    from tunix.rl import algo_core

    def train_step(state, example):
        model, optimizer = nnx.merge(graphdef, state)

        def loss(m):
            out = algo_core.grpo_loss_fn(m, example, algo, pad_id=0, eos_id=-1)
            return out[0] if isinstance(out, tuple) else out

        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), value

    return train_step


def run_tunix(path, data, group=2):
    """tunix's GRPO loss + optimizer update, compiled: (warmed-up callable, XLA memory, the
    first update's loss). The objective is set to jaxtom's: token-mean aggregation and the
    k3 ("low_var_kl") KL estimate clamped at 10 (jaxtom's `losses.KL_CLAMP`)."""
    import optax
    from flax import nnx
    from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample

    model, _ = parity.tunix_qwen3(path)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-6, weight_decay=0.01))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    algo = GRPOConfig(beta=0.01, epsilon=0.2, num_generations=group,
                      loss_agg_mode="token-mean", kl_loss_mode="low_var_kl",
                      kl_clamp_value=10.0)
    if not hasattr(algo, "temperature"):  # set from the rollout config inside GRPOLearner
        algo.temperature = 1.0
    prompt, completion, adv, ref = data[:4]
    width = completion.shape[1]
    lengths = data[4] if len(data) > 4 else np.full(len(completion), width)
    live = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int32)
    example = TrainExample(
        prompt_ids=jnp.asarray(prompt), prompt_mask=jnp.ones_like(prompt, dtype=bool),
        completion_ids=jnp.asarray(completion), completion_mask=jnp.asarray(live),
        advantages=jnp.asarray(adv), ref_per_token_logps=jnp.asarray(ref),
        old_per_token_logps=None)
    graphdef, state = nnx.split((model, optimizer))
    train_step = tunix_train_step(graphdef, algo)
    compiled = jax.jit(train_step, donate_argnums=0).lower(state, example).compile()
    box = {"state": state}

    def step():
        box["state"], value = compiled(box["state"], example)
        jax.block_until_ready(value)
        return float(value)

    return step, with_flops(compiled), step()


def with_flops(compiled) -> dict:
    """XLA's memory analysis of a compiled step plus its FLOP count (`flops`; XLA counts a
    loop's body once, and these programs have no loops at the benchmarked sizes)."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
    return dict(xla_memory(compiled), flops=float(cost.get("flops", float("nan"))))


_CHECKPOINTS: dict = {}


def checkpoint(sizes) -> Path:
    """A random Qwen3 checkpoint of `sizes` written by transformers (one per size set)."""
    from jaxtom.models.tiny import save_tiny_hf

    key = json.dumps(sizes, sort_keys=True)
    if key not in _CHECKPOINTS:
        _CHECKPOINTS[key] = Path(tempfile.mkdtemp()) / "qwen3"
        save_tiny_hf(_CHECKPOINTS[key], "qwen3", **sizes)
    return _CHECKPOINTS[key]


def side_by_side(sizes, group, repeats, with_tunix, prompt_len=PROMPT, seed=0):
    """[(seconds, memory, first loss)] of jaxtom (and tunix) on one model: the dense batch
    (`group` None) or the GRPO-shaped batch with groups of `group` (`grouped_data`), its
    tokens, rewards and lengths drawn from `seed`."""
    path = checkpoint(sizes)
    same = same_model(path) if with_tunix else None  # before anything is timed
    vocab = sizes["vocab_size"]
    if group is None:
        data = make_data(vocab, seed)
        runs = [lambda: run_jaxtom(path, jaxtom_dense_batch(data))]
        runs += [lambda: run_tunix(path, data)] if with_tunix else []
    else:
        data = grouped_data(vocab, group, prompt_len, seed)
        runs = [lambda: run_jaxtom(path, jaxtom_grouped_batch(data, group))]
        runs += [lambda: run_tunix(path, data, group)] if with_tunix else []
    steps, memory, losses = zip(*[run() for run in runs])
    seconds = timed(steps, repeats)
    return list(zip(seconds, memory, losses)), same


_PARITY: dict = {}


def same_model(path) -> dict:
    """Teacher-forced float32 log-probs and gradient norm of jaxtom and tunix on one
    checkpoint (once per checkpoint), checked to agree (`parity.check`)."""
    if str(path) not in _PARITY:
        from jaxtom import models
        tokens = parity.check_ids(
            json.loads((Path(path) / "config.json").read_text())["vocab_size"])
        figures = parity.compare(parity.jaxtom_side(models.from_pretrained(path), tokens),
                                 parity.tunix_side(parity.tunix_qwen3(path)[0], tokens),
                                 "tunix")
        parity.check(figures, "tunix")
        _PARITY[str(path)] = figures
    return _PARITY[str(path)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--vocab-repeats", type=int, default=3,
                        help="timed repeats on the Qwen3-vocabulary model")
    parser.add_argument("--groups", default="2,4,8",
                        help="group sizes of the GRPO-shaped batches ('' for none)")
    parser.add_argument("--long-prompt", type=int, default=256,
                        help="prompt tokens of the MindZero-shaped batch (groups of 8; 0 skips)")
    parser.add_argument("--seed", type=int, default=0,
                        help="draws the batches' tokens, rewards and completion lengths")
    parser.add_argument("--conversation", type=int, default=512,
                        help="prompt tokens of the CToM-shaped batch (groups of 4; 0 skips)")
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args()
    record = Run("grpo_step")
    try:
        import tunix  # noqa: F401
        with_tunix = True
    except ImportError:
        with_tunix = False
    mb = 2**20
    result = {"seed": args.seed, "batch": BATCH, "seq_len": PROMPT + COMPLETION,
              "completion": COMPLETION,
              "backend": jax.default_backend(), "memory": "XLA peak = arguments + outputs - "
              "aliased + temporaries", "load_average_before": os.getloadavg()[0]}
    cases = [("tiny", TINY, None, PROMPT, args.repeats),
             ("qwen3_vocab", QWEN3_VOCAB, None, PROMPT, args.vocab_repeats)]
    cases += [(f"tiny_groups_{g}", TINY, int(g), PROMPT, args.repeats)
              for g in args.groups.split(",") if g]
    paper_shapes = []
    if args.long_prompt:
        paper_shapes.append(("tiny_mindzero_shape", TINY, 8, args.long_prompt, args.repeats))
    if args.conversation:
        paper_shapes.append(("tiny_ctom_shape", TINY, 4, args.conversation, args.repeats))
    cases += paper_shapes
    for name, sizes, group, prompt_len, repeats in cases:
        sides, same = side_by_side(sizes, group, repeats, with_tunix, prompt_len, args.seed)
        shape = (f"{BATCH} x {PROMPT}+{COMPLETION}" if group is None else
                 f"{BATCH} samples in groups of {group} sharing a prompt, {prompt_len}-token "
                 f"prompts, completions of 8..{COMPLETION} tokens")
        print(f"{name} (vocab {sizes['vocab_size']}, d={sizes['hidden_size']}, "
              f"{sizes['num_hidden_layers']} layers), {shape}:")
        for side, (s, m, loss) in zip(("jaxtom", "tunix"), sides):
            print(f"  {side:6s} step {s * 1e3:8.1f} ms   peak {m['peak'] / mb:8.1f} MiB "
                  f"(arguments {m['arguments'] / mb:.1f}, outputs {m['outputs'] / mb:.1f}, "
                  f"aliased {m['aliased'] / mb:.1f}, temporaries {m['temporaries'] / mb:.1f})"
                  f"   first loss {loss:.6f}")
            result[f"{name}_{side}_step_s"] = s
            result[f"{name}_{side}_memory"] = m
            result[f"{name}_{side}_loss"] = loss
        if len(sides) == 2:
            (js, jm, jl), (ts, tm, tl) = sides
            result[f"{name}_speedup_vs_tunix"] = ts / js
            result[f"{name}_memory_ratio_vs_tunix"] = tm["peak"] / jm["peak"]
            # the same objective on the same weights and samples: the first losses agree
            result[f"{name}_loss_rel_diff"] = abs(jl - tl) / max(abs(tl), 1e-12)
            for key, value in same.items():
                result[f"{name}_{key}"] = value
            print(f"  jaxtom: {ts / js:.2f}x tunix's speed, {tm['peak'] / jm['peak']:.2f}x less "
                  f"peak memory; first losses differ by {result[f'{name}_loss_rel_diff']:.1e} "
                  f"(relative)")
    result["load_average_after"] = os.getloadavg()[0]
    if with_tunix:
        result["logprob_max_abs_diff"] = max(v["logprob_max_abs_diff"] for v in _PARITY.values())
        result["grad_norm_rel_diff"] = max(v["grad_norm_rel_diff"] for v in _PARITY.values())
        result["dense_speedup_vs_tunix"] = result["tiny_speedup_vs_tunix"]
        result["memory_ratio_vs_tunix"] = result["qwen3_vocab_memory_ratio_vs_tunix"]  # >= 3
        for name, _, group, prompt_len, _ in cases[2:]:
            print(f"  GRPO-shaped batch, groups of {group}, {prompt_len}-token prompts: "
                  f"{result[f'{name}_speedup_vs_tunix']:.2f}x")
        if paper_shapes:  # target >= 2: the smaller of the papers' shapes
            result["speedup_vs_tunix"] = min(result[f"{name}_speedup_vs_tunix"]
                                             for name, *_ in paper_shapes)
            print(f"speedup_vs_tunix {result['speedup_vs_tunix']:.2f} (tiny model, the smaller "
                  f"of the papers' batch shapes: "
                  f"{', '.join(name for name, *_ in paper_shapes)}; target >= 2)")
        print(f"dense_speedup_vs_tunix {result['dense_speedup_vs_tunix']:.2f} (tiny model, "
              f"8 distinct prompts x 1 sample, every completion 64 tokens)")
        print(f"memory_ratio_vs_tunix {result['memory_ratio_vs_tunix']:.2f} (Qwen3 vocabulary, "
              f"target >= 3)")
    else:
        print("tunix not installed: only jaxtom was measured (install the bench extra in a "
              "separate venv to compare)")
    record.emit(result, save=args.save)


if __name__ == "__main__":
    main()
