"""MindZero ELBO reward throughput: one batched JAX call vs a per-sample Python loop.

A GRPO batch of 1,024 (episode, timestep, completion) samples -- 32 episodes x 4 timesteps x 8
completions with random particle sets (N=2) -- is scored by `elbo_reward_batch` (planner
likelihoods of the 32 episodes, cumulated, gathered, eq. 4: one jitted call) and by
`jaxtom.mindzero.reference.elbo_reward_one` over the NumPy gridworld reference, one sample at a
time, replaying the episode to t as the public MindZero `compute_score` does. The reference runs
for `--reference-seconds` (or all samples) and its rate is samples/s over the samples it
finished. Both sides score the same parsed particles, and the results are compared. Parsing
(Python, shared by both) is timed separately. Last line: one JSON object.

    python benchmarks/reward.py [--samples 1024] [--reference-seconds 20]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import jax
import numpy as np

from jaxtom.gridworld import EnvParams, generate_episodes, goal_pairs
from jaxtom.mindzero import elbo_reward_batch, format_particles, parse_particles, to_arrays
from jaxtom.mindzero.reference import elbo_reward_one
from jaxtom.gridworld.text import object_labels

FIELDS = ("obj_pos", "human_pos", "helper_pos", "human_holding", "helper_holding",
          "human_last_action", "action")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--reference-seconds", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

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
    jax.block_until_ready(call())
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        reward = jax.block_until_ready(call())
        times.append(time.perf_counter() - t0)
    jax_s = float(np.median(times))

    walls = np.asarray(episodes.states.layout.walls)
    goal = np.asarray(episodes.states.goal)
    host = {k: np.asarray(getattr(episodes.trajectories, k)) for k in FIELDS}
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
    err = float(np.max(np.abs(np.asarray(reward)[order[:done]] - np.array(ref))
                       / np.maximum(1.0, np.abs(ref))))

    jax_rate, ref_rate = B / jax_s, done / ref_s
    print(f"platform {platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"{jax.devices()[0].platform}; {B} samples from {args.episodes} episodes, "
          f"mean t = {steps.mean():.1f}, {int((~ok).sum())} malformed")
    print(f"jaxtom  one batched call: {jax_s * 1e3:8.2f} ms  -> {jax_rate:12,.0f} samples/s")
    print(f"reference per-sample loop: {done} samples in {ref_s:.1f} s -> {ref_rate:10,.1f} "
          f"samples/s")
    print(f"speedup {jax_rate / ref_rate:,.0f}x; max relative difference {err:.2e}; parsing "
          f"{B / parse_s:,.0f} completions/s (Python, shared by both)")
    print(json.dumps({"samples": B, "samples_per_s": round(jax_rate, 1),
                      "reference_samples_per_s": round(ref_rate, 2),
                      "speedup": round(jax_rate / ref_rate, 1),
                      "parse_per_s": round(B / parse_s, 1), "max_rel_diff": err}))


if __name__ == "__main__":
    main()
