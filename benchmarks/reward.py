"""MindZero ELBO reward throughput: one batched JAX call vs a batched NumPy reward.

A GRPO batch of 1,024 (episode, timestep, completion) samples -- 32 episodes x 4 timesteps x 8
completions with random particle sets (N=2) -- is scored by `elbo_reward_batch` (planner
likelihoods of the 32 episodes, cumulated, gathered, eq. 4: one jitted call) and, the headline
baseline, by the vectorised NumPy reward of `benchmarks/numpy_baselines.py`: the per-step
likelihoods of the batch's episodes ([E, T, G] array code, `--numpy-dtype`, up to the longest
step any sample needs), cumulated once, gathered per sample, eq. 4 for all samples at once.
Both are handed the episodes' precomputed distance tables; the sides' calls alternate
(`--repeats` each, medians). The NumPy reward runs twice: computing its log-likelihoods
from the model, and looking them up in the precomputed table jaxtom uses
(`numpy_baselines.goal_log_likelihoods(table=True)`), so the ratio to the second is the
implementation's alone. A secondary, labelled figure: the scalar oracle
`jaxtom.mindzero.reference.elbo_reward_one`, one sample at a time over the NumPy gridworld
reference (replaying the episode to t as the public MindZero `compute_score` does, its lazy
BFS included), for `--reference-seconds` or all samples; its rate is samples/s over the
samples it finished. All sides score the same parsed particles, and the results are
compared. Parsing (Python, shared by all) is timed separately. Last line: one JSON object.

    python benchmarks/reward.py [--samples 1024] [--repeats 20] [--reference-seconds 10]
        [--numpy-dtype float32]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import jax
import numpy as np

from jaxtom.gridworld import EnvParams, generate_episodes, goal_pairs
from jaxtom.mindzero import elbo_reward_batch, format_particles, parse_particles, to_arrays
from jaxtom.mindzero.reference import elbo_reward_one
from jaxtom.gridworld.text import object_labels
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

try:
    from benchmarks import numpy_baselines
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import numpy_baselines

FIELDS = ("obj_pos", "human_pos", "helper_pos", "human_holding", "helper_holding",
          "human_last_action", "action")
LIKELIHOOD_FIELDS = ("human_pos", "human_holding", "human_last_action", "helper_holding",
                     "obj_pos", "action")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--reference-seconds", type=float, default=10.0,
                    help="time budget of the scalar oracle's per-sample loop")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--numpy-dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_args()
    record = Run("reward")
    load_before = os.getloadavg()[0]
    numpy_dtype = np.dtype(args.numpy_dtype).type

    params = EnvParams(max_steps=50)
    episodes = generate_episodes(jax.random.key(0), params, args.episodes, batch_size=512)
    rng = np.random.default_rng(0)
    per_episode = args.samples // (args.episodes * args.completions)
    episode, steps = [], []
    for e in range(args.episodes):
        for t in rng.choice(np.arange(1, episodes.length[e] + 1), per_episode, replace=False):
            episode += [e] * args.completions
            steps += [int(t)] * args.completions
    episode, steps = np.array(episode), np.array(steps)
    B = len(episode)
    pairs = goal_pairs(8)
    labels = [object_labels(jax.tree.map(lambda x: x[e], episodes.states))
              for e in range(args.episodes)]
    texts = [format_particles(pairs[rng.choice(56, 2, replace=False)], rng.dirichlet([1, 1]),
                              labels[e]) for e in episode]
    texts[::17] = ["{\"particles\": [oops"] * len(texts[::17])  # some malformed completions

    start = time.perf_counter()
    parsed = [parse_particles(t, labels[e], num_particles=2) for t, e in zip(texts, episode)]
    parse_s = time.perf_counter() - start
    goals, q, ok = to_arrays(parsed, 8, 2)

    call = lambda: elbo_reward_batch(episodes.trajectories, episode, steps, goals, q, ok,  # noqa
                                     params)[0]
    reward = np.asarray(jax.block_until_ready(call()))

    # the NumPy side gets host copies of the same trajectories and layout tables
    host = {k: np.asarray(getattr(episodes.trajectories, k)) for k in FIELDS}
    dist = np.asarray(episodes.trajectories.layout.dist)
    next_cell = np.asarray(episodes.trajectories.layout.next_cell)
    valid = np.asarray(episodes.trajectories.valid)

    def numpy_call(table=False):  # table: jaxtom's precomputed log-likelihood table
        used = int(steps.max())  # no sample needs a later step
        per_step = numpy_baselines.goal_log_likelihoods(
            dist, next_cell, *(host[k][:, :used] for k in LIKELIHOOD_FIELDS), params=params,
            dtype=numpy_dtype, table=table)
        cumulative = numpy_baselines.cumulative_log_likelihoods(per_step, valid[:, :used])
        return numpy_baselines.elbo_rewards(cumulative, episode, steps, goals, q, ok)

    numpy_reward = numpy_call()
    table_reward = numpy_call(True)
    jax_times, numpy_times, table_times = [], [], []
    for _ in range(args.repeats):  # alternating, so load from other jobs falls on both
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        jax_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        numpy_call()
        numpy_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        numpy_call(True)
        table_times.append(time.perf_counter() - t0)
    jax_s, numpy_s = statistics.median(jax_times), statistics.median(numpy_times)
    table_s = statistics.median(table_times)
    table_err = float(np.max(np.abs(table_reward.astype(np.float64) - reward)
                             / np.maximum(1.0, np.abs(table_reward))))
    numpy_err = float(np.max(np.abs(numpy_reward.astype(np.float64) - reward)
                             / np.maximum(1.0, np.abs(numpy_reward))))

    walls = np.asarray(episodes.states.layout.walls)
    goal = np.asarray(episodes.states.goal)
    order = rng.permutation(B)
    ref, done = [], 0
    t0 = time.perf_counter()
    for b in order:
        e = episode[b]
        r = parsed[b]
        ref.append(elbo_reward_one(walls[e], {k: v[e] for k, v in host.items()}, goal[e],
                                   int(steps[b]), r.pairs, r.q, r.ok, params))
        done += 1
        if time.perf_counter() - t0 > args.reference_seconds:
            break
    ref_s = time.perf_counter() - t0
    ref = np.array(ref)
    err = float(np.max(np.abs(reward[order[:done]] - ref) / np.maximum(1.0, np.abs(ref))))
    numpy_ref_err = float(np.max(np.abs(numpy_reward[order[:done]] - ref)
                                 / np.maximum(1.0, np.abs(ref))))
    load_after = os.getloadavg()[0]

    jax_rate, numpy_rate, ref_rate = B / jax_s, B / numpy_s, done / ref_s
    print(f"platform {platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"{jax.devices()[0].platform}, {os.cpu_count()} CPUs, load average "
          f"{load_before:.1f} -> {load_after:.1f}; {B} samples from {args.episodes} episodes, "
          f"mean t = {steps.mean():.1f}, max t = {steps.max()}, {int((~ok).sum())} malformed")
    print(f"jaxtom           one batched call: {jax_s * 1e3:8.2f} ms -> {jax_rate:12,.0f} "
          f"samples/s")
    print(f"vectorised NumPy one batched call: {numpy_s * 1e3:8.2f} ms -> {numpy_rate:12,.0f} "
          f"samples/s ({args.numpy_dtype})")
    print(f"speedup {jax_rate / numpy_rate:.2f}x vs the vectorised NumPy reward (medians of "
          f"{args.repeats} alternating calls); max relative difference {numpy_err:.2e}")
    print(f"NumPy with jaxtom's precomputed table: {table_s * 1e3:8.2f} ms -> "
          f"{B / table_s:12,.0f} samples/s; speedup {table_s / jax_s:.2f}x vs it; max relative "
          f"difference {table_err:.2e}")
    print(f"scalar oracle (correctness reference), per-sample loop: {done} samples in "
          f"{ref_s:.1f} s -> {ref_rate:10,.1f} samples/s; jaxtom {jax_rate / ref_rate:,.0f}x "
          f"vs it; max relative difference jaxtom {err:.2e}, NumPy {numpy_ref_err:.2e}")
    print(f"parsing {B / parse_s:,.0f} completions/s (Python, shared by all)")
    record.emit({"samples": B, "samples_per_s": round(jax_rate, 1),
                      "numpy_samples_per_s": round(numpy_rate, 1),
                      "speedup": round(jax_rate / numpy_rate, 2),
                      "numpy_dtype": args.numpy_dtype, "numpy_max_rel_diff": numpy_err,
                      # the same baseline looking its values up in jaxtom's precomputed table
                      "numpy_table_samples_per_s": round(B / table_s, 1),
                      "speedup_vs_numpy_table": round(table_s / jax_s, 2),
                      "numpy_table_max_rel_diff": table_err,
                      "scalar_oracle_samples_per_s": round(ref_rate, 2),
                      "speedup_vs_scalar_oracle": round(jax_rate / ref_rate, 1),
                      "parse_per_s": round(B / parse_s, 1), "max_rel_diff": err,
                      "repeats": args.repeats,
                      "load_average": [round(load_before, 2), round(load_after, 2)]}, save=args.save)


if __name__ == "__main__":
    main()
