"""A whole GRPO iteration, jaxtom's trainer vs tunix's GRPOLearner, on the same model.

One iteration is what each library's own training loop does per step: sample G completions
per prompt (temperature 1, stop ids, up to `--max-len` tokens), score them with the reward,
form group advantages, compute the reference log-probs (KL 0.01, k3) and take one AdamW
update (lr 1e-6, weight decay 0.01, global-norm clip 1.0, clip eps 0.2, token-mean loss).
jaxtom runs `jaxtom.rl.trainer.Trainer` with `CompletionRollout`; tunix runs
`GRPOLearner.train` on an `RLCluster` with its vanilla rollout, both float32 on this CPU,
the same tiny random Qwen3 checkpoint (`sampling.py`'s, RoPE base 1e6: `parity.py` checks
first that both sides score the same tokens with the same log-probs) and the same reward
(the share of a completion's tokens below half the vocabulary).

The batch, declared before anything is timed: 4 prompts of 64 random tokens, G = 8, and
stop ids chosen so completions end anywhere up to the cap: the `--stop-ids` token ids the
random model emits most often at temperature 1 (counted once on jaxtom's sampler).
Completions are sampled, so the two sides' lengths differ draw by draw; the figure is
trained completion tokens per second (each side's own tokens over its own time).

Timing: the interval between the starts of consecutive rollouts (one whole iteration),
median over `--steps` iterations after the first, on each side; beside it the median over
the iterations in which JAX compiled nothing (steady state, what a long run converges to)
and the programs each side compiled (JAX's compile log). jaxtom is
measured twice: as configured for this shape (`share_prompts`: a group's prompt packed
once; `compact_rows`: finished rows dropped from the decode loop) and with both off, so the
work avoided is reported apart from the rest. Last line: one JSON object.

    .venv-bench/bin/python benchmarks/grpo_iteration.py [--steps 6 --max-len 512]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import re
import statistics
import tempfile
import time

import numpy as np

try:
    from benchmarks import sampling as base
except ImportError:  # run as a script from benchmarks/
    import sampling as base

PROMPTS, GROUP, PROMPT_LEN = 4, 8, 64
LR, KL, EPS, WD, CLIP = 1e-6, 0.01, 0.2, 0.01, 1.0


def reward(tokens_per_completion) -> list[float]:
    """The share of each completion's tokens below half the vocabulary (both sides)."""
    half = base.CONFIG["vocab_size"] // 2
    return [float(np.mean(np.asarray(c) < half)) if len(c) else 0.0
            for c in tokens_per_completion]


def choose_stop_ids(model, prompts, count: int, max_len: int) -> list[int]:
    """The `count` ids the model samples most often after these prompts (one jaxtom call)."""
    import jax

    from jaxtom import sampling
    out = sampling.generate(model, [p for p in prompts for _ in range(GROUP)],
                            max_new_tokens=max_len, temperature=1.0, key=jax.random.key(99),
                            stop_at_eos=False)
    counts = np.bincount(out.tokens.ravel(), minlength=base.CONFIG["vocab_size"])
    counts[0] = 0  # the pad id
    return [int(i) for i in np.argsort(-counts)[:count]]


class CompileTimes(logging.Handler):
    """When JAX compiled which program (its "Compiling NAME" log records)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[float, str]] = []

    def emit(self, record):
        m = re.match(r"Compiling (?:jit\()?(\w+)", record.getMessage())
        if m:
            self.events.append((time.perf_counter(), m.group(1)))


def watch_compiles() -> CompileTimes:
    import jax
    log = CompileTimes()
    jax_logger = logging.getLogger("jax")
    jax_logger.addHandler(log)
    jax_logger.propagate = False
    jax.config.update("jax_log_compiles", True)
    return log


def side_figures(starts: list[float], lengths: list[int], log: CompileTimes,
                 since: float) -> dict:
    """Seconds per iteration (differences of consecutive rollout starts, the first left
    out), over all iterations and over those that compiled nothing, and the programs
    compiled during the run."""
    spans = list(zip(starts[1:], starts[2:]))
    times = [b - a for a, b in spans]
    quiet = [b - a for a, b in spans if not any(a <= t < b for t, _ in log.events)]
    per_step = len(lengths) // len(starts)
    tokens = lengths[per_step:(1 + len(times)) * per_step]
    compiled = collections.Counter(name for t, name in log.events if t >= since)
    return {"seconds": statistics.median(times), "times": times,
            "steady_seconds": statistics.median(quiet) if quiet else None,
            "compile_free_iterations": len(quiet), "compiles": dict(compiled),
            "completion_tokens_per_iteration": float(np.mean(tokens)) * per_step,
            "mean_completion_len": float(np.mean(tokens))}


def run_jaxtom(path, prompts, stops, max_len, steps, optimized: bool, log) -> dict:
    from jaxtom import models
    from jaxtom.rl.step import StepConfig
    from jaxtom.rl.trainer import CompletionRollout, Trainer, TrainerConfig

    starts, lengths, since = [], [], time.perf_counter()

    def scored(completions, records):
        lengths.extend(len(c) for c in completions)
        return reward(completions)

    class Timed(CompletionRollout):
        def __call__(self, model, tasks, key, step):
            starts.append(time.perf_counter())
            return super().__call__(model, tasks, key, step)

    cfg = TrainerConfig(workdir=tempfile.mkdtemp(prefix="iter-"), total_steps=steps + 2,
                        prompts_per_step=PROMPTS, group_size=GROUP, max_new_tokens=max_len,
                        temperature=1.0, stop_tokens=tuple(stops), row_len=PROMPT_LEN + max_len,
                        share_prompts=optimized, compact_rows=optimized,
                        checkpoint_every=10 ** 6, progress=False)
    step_cfg = StepConfig(learning_rate=LR, weight_decay=WD, max_grad_norm=CLIP, kl_coef=KL,
                          clip_low=EPS, clip_high=EPS, total_steps=steps + 2,
                          end_lr_ratio=1.0)
    tasks = [{"prompt": p} for p in prompts]
    Trainer(models.from_pretrained(path), tasks, Timed(scored, cfg), step_cfg, cfg).run()
    return side_figures(starts, lengths, log, since)


def run_tunix(path, prompts, stops, max_len, steps, log) -> dict:
    import grain.python as grain
    import jax
    import optax
    from tunix.rl import rl_cluster as cluster_lib
    from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner
    from tunix.rl.rollout import base_rollout

    try:
        from benchmarks.parity import tunix_qwen3
        from benchmarks.tunix_peer import IdTokenizer
    except ImportError:
        from parity import tunix_qwen3
        from tunix_peer import IdTokenizer

    actor, _ = tunix_qwen3(path)
    reference, _ = tunix_qwen3(path)
    # a plain (auto-sharded) one-device mesh: make_mesh's explicit axes break tunix's gathers
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    roles = cluster_lib.Role
    total = steps + 2
    config = cluster_lib.ClusterConfig(
        role_to_mesh={roles.ACTOR: mesh, roles.REFERENCE: mesh, roles.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False,
        training_config=cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.chain(optax.clip_by_global_norm(CLIP),
                                        optax.adamw(LR, weight_decay=WD)),
            eval_every_n_steps=10 ** 6, max_steps=total),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=max_len, max_prompt_length=PROMPT_LEN,
            kv_cache_size=PROMPT_LEN + max_len + 8, temperature=1.0, eos_tokens=list(stops)))
    cluster = cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=IdTokenizer(),
                                    cluster_config=config)
    starts, lengths, since = [], [], time.perf_counter()

    def scored(prompts, completions, **_):
        ids = [[int(t) for t in c.split()] for c in completions]
        lengths.extend(len(c) for c in ids)
        return reward(ids)

    algo = GRPOConfig(num_generations=GROUP, num_iterations=1, beta=KL, epsilon=EPS,
                      loss_agg_mode="token-mean", kl_loss_mode="low_var_kl")
    learner = GRPOLearner(rl_cluster=cluster, reward_fns=scored, algo_config=algo)
    inner = learner._generate_and_compute_advantage

    def timed(*args, **kwargs):
        starts.append(time.perf_counter())
        return inner(*args, **kwargs)

    learner._generate_and_compute_advantage = timed
    texts = [" ".join(map(str, p)) for p in prompts]
    data = (grain.MapDataset.source(texts).repeat(total).batch(PROMPTS)
            .map(lambda x: {"prompts": x}))
    learner.train(data)
    return side_figures(starts, lengths, log, since)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--stop-ids", type=int, default=24)
    base.add_thread_options(parser)
    args = parser.parse_args(argv)
    threads = base.apply_thread_options(args)  # before JAX starts
    log = watch_compiles()
    from jaxtom import models
    from jaxtom.models.tiny import save_tiny_hf

    path = tempfile.mkdtemp(prefix="bench-qwen3-")
    torch_model = save_tiny_hf(path, "qwen3", **base.CONFIG)
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, base.CONFIG["vocab_size"], (PROMPTS, PROMPT_LEN)).tolist()
    model = models.from_pretrained(path)
    stops = choose_stop_ids(model, prompts, args.stop_ids, args.max_len)
    print(f"tiny Qwen3 {base.CONFIG}; {PROMPTS} prompts x G={GROUP}, prompt {PROMPT_LEN}, "
          f"completions up to {args.max_len} (stop ids {stops})")
    parity = base.parity_module()
    check = np.random.default_rng(7).integers(1, base.CONFIG["vocab_size"], (4, 96))
    mine = parity.jaxtom_side(model, check)
    same = {"transformers": parity.compare(mine, parity.transformers_side(torch_model, check),
                                           "transformers")}
    sides = {}
    try:
        same["tunix"] = parity.compare(mine, parity.tunix_side(parity.tunix_qwen3(path)[0],
                                                               check), "tunix")
        parity.check(same["tunix"], "tunix")
        sides["tunix"] = run_tunix(path, prompts, stops, args.max_len, args.steps, log)
    except ImportError as err:
        print(f"tunix not measured: {err}")
    sides["jaxtom"] = run_jaxtom(path, prompts, stops, args.max_len, args.steps, True, log)
    sides["jaxtom_plain"] = run_jaxtom(path, prompts, stops, args.max_len, args.steps, False,
                                       log)
    for side in sides.values():
        side["tokens_per_s"] = side["completion_tokens_per_iteration"] / side["seconds"]
        side["steady_tokens_per_s"] = (side["completion_tokens_per_iteration"]
                                       / side["steady_seconds"] if side["steady_seconds"]
                                       else None)
    result = {"threads": threads, "prompts": PROMPTS, "group": GROUP, "prompt_len": PROMPT_LEN,
              "max_len": args.max_len, "stop_ids": stops, "parity": same,
              "logprob_max_abs_diff": max(f["logprob_max_abs_diff"] for f in same.values()),
              "sides": sides,
              "work_avoided_speedup": sides["jaxtom"]["tokens_per_s"]
              / sides["jaxtom_plain"]["tokens_per_s"]}
    for name, side in sides.items():
        print(f"{name:13s} {side['seconds']:6.2f} s/iteration, mean completion "
              f"{side['mean_completion_len']:5.1f} tokens, {side['tokens_per_s']:8.1f} trained "
              f"completion tokens/s; compile-free iterations {side['compile_free_iterations']}"
              f" at {side['steady_seconds'] or float('nan'):.2f} s; compiled {side['compiles']}"
              f" (iterations: {[round(t, 2) for t in side['times']]})")
    if "tunix" in sides:
        result["speedup_vs_tunix"] = sides["jaxtom"]["tokens_per_s"] / sides["tunix"]["tokens_per_s"]
        result["plain_speedup_vs_tunix"] = (sides["jaxtom_plain"]["tokens_per_s"]
                                            / sides["tunix"]["tokens_per_s"])
        if sides["jaxtom"]["steady_tokens_per_s"] and sides["tunix"]["steady_tokens_per_s"]:
            result["steady_speedup_vs_tunix"] = (sides["jaxtom"]["steady_tokens_per_s"]
                                                 / sides["tunix"]["steady_tokens_per_s"])
        print(f"speedup vs tunix {result['speedup_vs_tunix']:.2f}x (work avoided by packing "
              f"and compaction {result['work_avoided_speedup']:.2f}x; without them "
              f"{result['plain_speedup_vs_tunix']:.2f}x)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
