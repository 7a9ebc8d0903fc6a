"""Gridworld throughput: jaxtom (jit + vmap + scan) vs the NumPy reference one episode at a time.

(a) simulated env steps per second, human + oracle helper, batch 4096: each episode
    restarts from its initial scene when it finishes (auto-reset), so every scan step is a
    live step; the fixed-horizon episodic rollout (done-masked, counting only steps before each
    end) is printed too;
(b) goal-likelihood evaluations (timestep x goal) per second on those steps.
Both sides run on the same episodes in this process, in alternating rounds (one jaxtom call,
then the reference for its share of the time budget, --rounds times), so that load from other
jobs on a shared machine falls on both alike; rates and ratios are medians over the rounds.
Episode construction (walls, all-pairs BFS) is timed separately.
The last line is one JSON object with the figures and the load average.

    python benchmarks/gridworld.py [--batch 4096] [--reference-seconds 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import jax
import numpy as np

from jaxtom.gridworld import reference
from jaxtom.gridworld.inference import goal_log_likelihoods
from jaxtom.gridworld.simulation import reset_batch, rollout_batch
from jaxtom.gridworld.types import EnvParams


def timed(fn, *args, repeats=3):
    """Best wall time of `repeats` calls after one warm-up (compilation) call."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best, out


def alternating(rounds, ours, theirs):
    """Median work-per-second of each side over `rounds` alternating repeats, and the per-round
    ratios. `ours()` / `theirs()` return (work, seconds)."""
    ours_rates, their_rates = [], []
    for _ in range(rounds):
        work, seconds = ours()
        ours_rates.append(work / seconds)
        work, seconds = theirs()
        their_rates.append(work / seconds)
    ratios = [a / b for a, b in zip(ours_rates, their_rates)]
    return statistics.median(ours_rates), statistics.median(their_rates), ratios


def wall(fn, *args):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--reference-seconds", type=float, default=20.0,
                        help="time budget of each reference measurement, over all rounds")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    params = EnvParams()
    key = jax.random.key(0)
    goals = params.num_goals
    load_before = os.getloadavg()[0]
    budget = args.reference_seconds / args.rounds

    reset_s, states = timed(lambda k: reset_batch(k, params, args.batch), key, repeats=1)
    keys = jax.random.split(jax.random.key(1), args.batch)
    roll = jax.jit(lambda k, s: rollout_batch(k, s, params, "oracle", auto_reset=True))
    _, traj, _, _ = jax.block_until_ready(roll(keys, states))
    steps = int(np.asarray(traj.valid).sum())
    episodic = lambda k, s: rollout_batch(k, s, params, "oracle")  # noqa: E731
    episodic_s, (_, episodic_traj, _, _) = timed(episodic, keys, states)
    episodic_steps = int(np.asarray(episodic_traj.valid).sum())
    lik = jax.jit(lambda t: goal_log_likelihoods(t, params))
    jax.block_until_ready(lik(traj))

    host_states = jax.tree.map(np.asarray, states)
    host_traj = jax.tree.map(np.asarray, traj)
    ref_build = [0.0]

    def reference_env():  # NumPy reference, one episode at a time, on the same episodes
        rng = np.random.default_rng(0)
        done = spent = 0.0
        episode = 0
        while spent < budget and episode < args.batch:
            one = jax.tree.map(lambda x: x[episode], host_states)
            start = time.perf_counter()
            state = reference.from_env_state(one)
            reference.Distances(state.walls)  # construction: BFS fields are built lazily below
            ref_build[0] += time.perf_counter() - start
            start = time.perf_counter()
            visited = reference.run_episode(rng, state, params, "oracle")
            spent += time.perf_counter() - start
            done += len(visited) - 1
            episode += 1
        return done, spent

    episodes_states = {}

    def reference_states(episode):
        if episode not in episodes_states:
            length = int(host_traj.valid[episode].sum())
            walls = host_traj.layout.walls[episode]
            episodes_states[episode] = length, [reference.RefState(
                walls=walls, obj_pos=[tuple(p) for p in host_traj.obj_pos[episode, t].tolist()],
                human_pos=tuple(host_traj.human_pos[episode, t].tolist()), helper_pos=(0, 0),
                human_holding=int(host_traj.human_holding[episode, t]),
                helper_holding=int(host_traj.helper_holding[episode, t]),
                human_last_action=int(host_traj.human_last_action[episode, t]), helper_stays=0,
                goal=(0, 1)) for t in range(length)]
        return episodes_states[episode]

    def reference_likelihoods():
        done = spent = 0.0
        episode = 0
        while spent < budget and episode < args.batch:
            length, ref_states = reference_states(episode)
            start = time.perf_counter()
            reference.step_log_likelihoods(ref_states, host_traj.action[episode, :length], params)
            spent += time.perf_counter() - start
            done += length * goals
            episode += 1
        return done, spent

    env_steps_per_s, ref_env_steps_per_s, env_ratios = alternating(
        args.rounds, lambda: (steps, wall(roll, keys, states)), reference_env)
    lik_per_s, ref_lik_per_s, lik_ratios = alternating(
        args.rounds, lambda: (steps * goals, wall(lik, traj)), reference_likelihoods)
    load_after = os.getloadavg()[0]

    env_speedup = env_steps_per_s / ref_env_steps_per_s
    likelihood_speedup = lik_per_s / ref_lik_per_s
    print(f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} "
          f"{jax.default_backend()} device(s), batch {args.batch}, max_steps {params.max_steps}, "
          f"load average {load_before:.1f} -> {load_after:.1f}")
    print(f"(a) env steps/s   jaxtom {env_steps_per_s:12,.0f}   reference {ref_env_steps_per_s:10,.0f}"
          f"   ratio {env_speedup:8.1f}x   ({steps:,} steps per call; medians of {args.rounds} "
          f"rounds, per round {', '.join(f'{r:.0f}' for r in env_ratios)})")
    print(f"    episodic fixed-horizon rollout: {episodic_steps / episodic_s:,.0f} live steps/s "
          f"({episodic_steps:,} of {args.batch * params.max_steps:,} scan steps before the end)")
    print(f"(b) likelihoods/s jaxtom {lik_per_s:12,.0f}   reference {ref_lik_per_s:10,.0f}"
          f"   ratio {likelihood_speedup:8.1f}x   (per round "
          f"{', '.join(f'{r:.0f}' for r in lik_ratios)})")
    print(f"    episode construction: jaxtom {args.batch / reset_s:,.0f}/s (all-pairs BFS in "
          f"JAX), reference BFS cache setup is lazy ({ref_build[0]:.4f}s total)")
    print(json.dumps({
        "env_steps_per_s": round(env_steps_per_s), "reference_env_steps_per_s": round(ref_env_steps_per_s),
        "env_speedup": round(env_speedup, 1), "likelihoods_per_s": round(lik_per_s),
        "reference_likelihoods_per_s": round(ref_lik_per_s),
        "likelihood_speedup": round(likelihood_speedup, 1),
        "likelihood_speedup_rounds": [round(r, 1) for r in lik_ratios],
        "resets_per_s": round(args.batch / reset_s),
        "episodic_env_steps_per_s": round(episodic_steps / episodic_s),
        "batch": args.batch, "rounds": args.rounds,
        "load_average": [round(load_before, 2), round(load_after, 2)]}))


if __name__ == "__main__":
    main()
