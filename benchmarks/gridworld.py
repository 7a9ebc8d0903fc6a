"""Gridworld throughput: jaxtom (jit + vmap + scan) vs NumPy, measured side by side.

(a) simulated env steps per second, human + oracle helper, batch 4096: each episode
    restarts from its initial scene when it finishes (auto-reset), so every scan step is a
    live step; the fixed-horizon episodic rollout (done-masked, counting only steps before each
    end) is printed too. Against the scalar oracle `jaxtom.gridworld.reference` stepping one
    episode at a time (a correctness reference, not a tuned simulator).
(b) goal-likelihood evaluations (timestep x goal) per second on those steps. Headline: against
    the vectorised NumPy baseline `benchmarks/numpy_baselines.py` ([E, T, G] array code over
    `--numpy-episodes` episodes per call, in `--numpy-dtype`), which is handed the same
    precomputed distance tables (`Layout.dist`, `Layout.next_cell`) as jaxtom, so path search
    is counted on neither side; the baseline runs twice, computing its log-likelihoods
    from the model and looking them up in the precomputed table jaxtom uses
    (`goal_log_likelihoods(table=True)`), so the second ratio is the implementation's alone.
    The scalar oracle's rate (one state, one goal at a time; its
    BFS fields are built before timing) is printed as a secondary, labelled figure.
Each side runs on the same episodes in this process, in alternating rounds (one jaxtom call,
then each baseline, --rounds times), so that load from other jobs on a shared machine falls on
all alike; rates and ratios are medians over the rounds. Process CPU time over wall time is
printed for each side of (b) (about 1: one core used). Episode construction (walls, all-pairs
BFS) is timed separately. The last line is one JSON object with the figures and the load
average.

    python benchmarks/gridworld.py [--batch 4096] [--reference-seconds 10] [--rounds 5]
        [--numpy-episodes 8] [--numpy-dtype float32]
"""

from __future__ import annotations

import argparse
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
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

try:
    from benchmarks import numpy_baselines
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import numpy_baselines


FIELDS = ("human_pos", "human_holding", "human_last_action", "helper_holding", "obj_pos",
          "action")


def timed(fn, *args, repeats=3):
    """Best wall time of `repeats` calls after one warm-up (compilation) call."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best, out


def alternating(rounds, ours, *theirs):
    """Median work-per-second of each side over `rounds` alternating repeats (ours, then each
    of theirs), and the per-round ratios of ours to each of theirs. Every callable returns
    (work, seconds)."""
    rates = [[] for _ in range(1 + len(theirs))]
    for _ in range(rounds):
        for side, fn in zip(rates, (ours,) + theirs):
            work, seconds = fn()
            side.append(work / seconds)
    ratios = [[a / b for a, b in zip(rates[0], side)] for side in rates[1:]]
    return [statistics.median(side) for side in rates], ratios


def wall(fn, *args):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


class CpuClock:
    """Process CPU seconds and wall seconds spent inside `with clock:` blocks (their ratio is
    the number of cores a side kept busy)."""

    def __init__(self):
        self.cpu = self.wall = 0.0

    def __enter__(self):
        self._start = time.process_time(), time.perf_counter()

    def __exit__(self, *exc):
        self.cpu += time.process_time() - self._start[0]
        self.wall += time.perf_counter() - self._start[1]

    @property
    def cores(self):
        return self.cpu / self.wall if self.wall else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--reference-seconds", type=float, default=10.0,
                        help="time budget of each scalar-oracle measurement, over all rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--numpy-episodes", type=int, default=8,
                        help="episodes per call of the vectorised NumPy likelihood")
    parser.add_argument("--numpy-dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args()
    record = Run("gridworld")
    params = EnvParams()
    key = jax.random.key(0)
    goals = params.num_goals
    load_before = os.getloadavg()[0]
    budget = args.reference_seconds / args.rounds
    numpy_dtype = np.dtype(args.numpy_dtype).type

    reset_s, states = timed(lambda k: reset_batch(k, params, args.batch), key, repeats=1)
    keys = jax.random.split(jax.random.key(1), args.batch)
    roll = jax.jit(lambda k, s: rollout_batch(k, s, params, "oracle", auto_reset=True))
    _, traj, _, _ = jax.block_until_ready(roll(keys, states))
    steps = int(np.asarray(traj.valid).sum())
    episodic = lambda k, s: rollout_batch(k, s, params, "oracle")  # noqa: E731
    episodic_s, (_, episodic_traj, _, _) = timed(episodic, keys, states)
    episodic_steps = int(np.asarray(episodic_traj.valid).sum())
    lik = jax.jit(lambda t: goal_log_likelihoods(t, params))
    jax_lik = np.asarray(lik(traj))

    host_states = jax.tree.map(np.asarray, states)
    host_traj = jax.tree.map(np.asarray, traj)
    ref_build = [0.0]

    def reference_env():  # scalar oracle, one episode at a time, on the same episodes
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

    oracle_tables = {}  # walls -> the scalar oracle's BFS cache, filled from jaxtom's table

    def reference_states(episode):
        """Scalar-oracle states of one episode; its layout's BFS cache is filled from the
        episode's `Layout.dist` before timing, so path search is timed on no side."""
        if episode not in episodes_states:
            length = int(host_traj.valid[episode].sum())
            walls = host_traj.layout.walls[episode]
            height, width = walls.shape
            table = reference.Distances(walls)
            for cell, row in enumerate(host_traj.layout.dist[episode].astype(np.int64)):
                table._cache[(cell % width, cell // width)] = row.reshape(height, width)
            oracle_tables[walls.tobytes()] = table
            episodes_states[episode] = length, [reference.RefState(
                walls=walls, obj_pos=[tuple(p) for p in host_traj.obj_pos[episode, t].tolist()],
                human_pos=tuple(host_traj.human_pos[episode, t].tolist()), helper_pos=(0, 0),
                human_holding=int(host_traj.human_holding[episode, t]),
                helper_holding=int(host_traj.helper_holding[episode, t]),
                human_last_action=int(host_traj.human_last_action[episode, t]), helper_stays=0,
                goal=(0, 1)) for t in range(length)]
        return episodes_states[episode]

    real_distances = reference.Distances

    def prefilled_distances(walls):  # step_log_likelihoods' per-layout cache, prefilled
        return oracle_tables.get(walls.tobytes()) or real_distances(walls)

    def oracle_likelihoods():
        done = spent = 0.0
        episode = 0
        reference.Distances = prefilled_distances
        try:
            while spent < budget and episode < args.batch:
                length, ref_states = reference_states(episode)
                start = time.perf_counter()
                reference.step_log_likelihoods(ref_states, host_traj.action[episode, :length],
                                               params)
                spent += time.perf_counter() - start
                done += length * goals
                episode += 1
        finally:
            reference.Distances = real_distances
        return done, spent

    jax_clock, numpy_clock = CpuClock(), CpuClock()
    numpy_out = [None, None]  # without / with jaxtom's precomputed table

    def jaxtom_likelihoods():
        with jax_clock:
            seconds = wall(lik, traj)
        return steps * goals, seconds

    def numpy_likelihoods(table=False):  # the vectorised NumPy baseline, on the whole batch
        chunk = args.numpy_episodes
        start = time.perf_counter()
        with numpy_clock:
            outs = [numpy_baselines.goal_log_likelihoods(
                host_traj.layout.dist[e:e + chunk], host_traj.layout.next_cell[e:e + chunk],
                *(getattr(host_traj, f)[e:e + chunk] for f in FIELDS), params=params,
                dtype=numpy_dtype, table=table) for e in range(0, args.batch, chunk)]
        seconds = time.perf_counter() - start
        numpy_out[int(table)] = outs
        return steps * goals, seconds

    (env_steps_per_s, ref_env_steps_per_s), (env_ratios,) = alternating(
        args.rounds, lambda: (steps, wall(roll, keys, states)), reference_env)
    (lik_per_s, numpy_lik_per_s, table_lik_per_s, oracle_lik_per_s), (lik_ratios, table_ratios,
                                                                      _) = alternating(
        args.rounds, jaxtom_likelihoods, numpy_likelihoods, lambda: numpy_likelihoods(True),
        oracle_likelihoods)
    load_after = os.getloadavg()[0]
    valid = host_traj.valid[..., None]
    numpy_lik = np.concatenate(numpy_out[0])
    max_diff = float(np.max(np.abs(np.where(valid, numpy_lik.astype(np.float64) - jax_lik, 0.0))))
    table_lik = np.concatenate(numpy_out[1])
    table_diff = float(np.max(np.abs(np.where(valid, table_lik.astype(np.float64) - jax_lik,
                                              0.0))))
    table_speedup = lik_per_s / table_lik_per_s

    env_speedup = env_steps_per_s / ref_env_steps_per_s
    likelihood_speedup = lik_per_s / numpy_lik_per_s
    oracle_speedup = lik_per_s / oracle_lik_per_s
    print(f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} "
          f"{jax.default_backend()} device(s), {os.cpu_count()} CPUs, batch {args.batch}, "
          f"max_steps {params.max_steps}, load average {load_before:.1f} -> {load_after:.1f}")
    print(f"(a) env steps/s   jaxtom {env_steps_per_s:12,.0f}   scalar oracle "
          f"{ref_env_steps_per_s:10,.0f}   ratio {env_speedup:8.1f}x vs the scalar oracle "
          f"(correctness reference)   ({steps:,} steps per call; medians of {args.rounds} "
          f"rounds, per round {', '.join(f'{r:.0f}' for r in env_ratios)})")
    print(f"    episodic fixed-horizon rollout: {episodic_steps / episodic_s:,.0f} live steps/s "
          f"({episodic_steps:,} of {args.batch * params.max_steps:,} scan steps before the end)")
    print(f"(b) likelihoods/s jaxtom {lik_per_s:12,.0f}   vectorised NumPy "
          f"{numpy_lik_per_s:12,.0f}   ratio {likelihood_speedup:6.1f}x   (per round "
          f"{', '.join(f'{r:.1f}' for r in lik_ratios)}; NumPy {args.numpy_dtype}, "
          f"{args.numpy_episodes} episodes per call; max |NumPy - jaxtom| {max_diff:.1e})")
    print(f"    NumPy with jaxtom's precomputed table {table_lik_per_s:12,.0f}   ratio "
          f"{table_speedup:6.1f}x   (per round {', '.join(f'{r:.1f}' for r in table_ratios)}; "
          f"max |NumPy - jaxtom| {table_diff:.1e})")
    print(f"    cores busy (process CPU / wall): jaxtom {jax_clock.cores:.2f}, NumPy "
          f"{numpy_clock.cores:.2f}")
    print(f"    vs the scalar oracle (correctness reference, BFS prebuilt): "
          f"{oracle_lik_per_s:10,.0f} likelihoods/s, ratio {oracle_speedup:,.0f}x")
    print(f"    episode construction: jaxtom {args.batch / reset_s:,.0f}/s (all-pairs BFS in "
          f"JAX), oracle BFS cache setup is lazy ({ref_build[0]:.4f}s total)")
    record.emit({
        "env_steps_per_s": round(env_steps_per_s),
        "env_steps_per_s_scalar_oracle": round(ref_env_steps_per_s),
        "env_speedup_vs_scalar_oracle": round(env_speedup, 1),
        "likelihoods_per_s": round(lik_per_s),
        "numpy_likelihoods_per_s": round(numpy_lik_per_s),
        "likelihood_speedup": round(likelihood_speedup, 2),
        "likelihood_speedup_rounds": [round(r, 2) for r in lik_ratios],
        "numpy_dtype": args.numpy_dtype, "numpy_episodes_per_call": args.numpy_episodes,
        "numpy_max_abs_diff": max_diff,
        # the same baseline looking its values up in jaxtom's precomputed table
        "numpy_table_likelihoods_per_s": round(table_lik_per_s),
        "likelihood_speedup_vs_numpy_table": round(table_speedup, 2),
        "likelihood_speedup_vs_numpy_table_rounds": [round(r, 2) for r in table_ratios],
        "numpy_table_max_abs_diff": table_diff,
        "cores_busy": {"jaxtom": round(jax_clock.cores, 2), "numpy": round(numpy_clock.cores, 2)},
        "scalar_oracle_likelihoods_per_s": round(oracle_lik_per_s),
        "likelihood_speedup_vs_scalar_oracle": round(oracle_speedup, 1),
        "resets_per_s": round(args.batch / reset_s),
        "episodic_env_steps_per_s": round(episodic_steps / episodic_s),
        "batch": args.batch, "rounds": args.rounds,
        "load_average": [round(load_before, 2), round(load_after, 2)]}, save=args.save)


if __name__ == "__main__":
    main()
