"""Whole-episode rollouts with `lax.scan` and the speedup metric (MindZero appendix A.2).

Every step draws the human's key from `fold_in(key, t)` alone, so the human's randomness does
not depend on the helper: a helper that only stays reproduces the baseline exactly.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld import env
from jaxtom.gridworld import helper as helper_lib
from jaxtom.gridworld.inference import Trajectory, step_goal_log_likelihoods, start_order_prior
from jaxtom.gridworld.types import STAY, EnvParams, EnvState, goal_index, goal_pairs

HELPERS = ("oracle", "bip", "random", "stay")


def _check_helper(helper: str) -> str:
    if helper not in HELPERS:
        raise ValueError(f"unknown helper {helper!r}; expected one of {HELPERS}")
    return helper


def top_particles(log_posterior, all_goals, count: int):
    """The `count` most probable goals and their renormalised probabilities (the belief a
    particle-based helper sees); `count=0` keeps the full posterior."""
    if count <= 0 or count >= all_goals.shape[0]:
        return all_goals, jax.nn.softmax(log_posterior)
    top_logp, top = jax.lax.top_k(log_posterior, count)
    return all_goals[top], jax.nn.softmax(top_logp)


@functools.partial(jax.jit, static_argnames=("params", "helper", "horizon", "track_posterior",
                                             "bip_particles", "auto_reset", "ordering_prior"))
def rollout(key: jax.Array, state: EnvState, params: EnvParams, helper: str = "stay",
            horizon: int | None = None, track_posterior: bool = False, bip_particles: int = 0,
            auto_reset: bool = False, ordering_prior: bool = True):
    """Run one episode for `horizon` (default `max_steps`) steps with a helper driven by the
    true goal (`oracle`), the exact posterior (`bip`, the `bip_particles` most probable goals or
    all of them if 0), a random goal (`random`) or nothing (`stay`). Returns
    `(final_state, trajectory, helper_actions, true_goal_posterior)`; the posterior of the true
    goal before each step is tracked for `bip` or when asked. The posterior starts from the
    nearest-first ordering prior (`start_order_prior`: the human picks the goal object nearer
    its start first, which the assistance prompt also tells models) unless `ordering_prior` is
    off, then from a uniform prior over the 56 ordered goals. Every helper but `stay` is
    `gridworld.helper.act` on its belief, with the rules set in `params` (make way, deadlock
    breaker, belief kept after pauses, teleport).

    With `auto_reset`, a finished episode restarts at once from its initial state (same scene,
    fresh randomness), so every scan step simulates a live step -- the usual way to measure
    simulator throughput. The trajectory then strings several episodes together."""
    _check_helper(helper)
    horizon = horizon or params.max_steps
    num_goals = params.num_goals
    all_goals = jnp.asarray(goal_pairs(params.num_objects))
    track = track_posterior or helper == "bip"
    k_random, key = jax.random.split(key)
    random_goal = all_goals[jax.random.randint(k_random, (), 0, num_goals)]
    true_goal = goal_index(state.goal[0], state.goal[1], params.num_objects)
    full = bip_particles <= 0 or bip_particles >= num_goals
    belief_size = 1 if helper in ("oracle", "random") else (num_goals if full else bip_particles)
    fresh_memory = helper_lib.init_memory(belief_size, params)

    def body(carry, t):
        state, log_post, memory = carry
        k_human, k_helper = jax.random.split(jax.random.fold_in(key, t))
        human_action = env.sample_human_action(k_human, state, params)
        teleport = -1
        if helper == "stay":
            helper_action = jnp.int32(STAY)
        else:
            if helper == "oracle":
                goals, probs = state.goal[None], jnp.ones(1)
            elif helper == "random":
                goals, probs = random_goal[None], jnp.ones(1)
            else:
                goals, probs = top_particles(log_post, all_goals, bip_particles)
            helper_action, teleport, memory = helper_lib.act(k_helper, state, memory, goals,
                                                             probs, params)
        posterior_true = jax.nn.softmax(log_post)[true_goal]
        if track:
            step_ll = step_goal_log_likelihoods(
                state.layout, state.human_pos, state.human_holding, state.human_last_action,
                state.helper_holding, state.obj_pos, human_action, params)
            log_post = log_post + jnp.where(state.done, 0.0, step_ll)
        record = (state.human_pos, state.human_holding, state.human_last_action,
                  state.helper_holding, state.helper_pos, state.obj_pos, human_action,
                  ~state.done)
        new_state = env.transition(state, human_action, helper_action, params, teleport)
        if auto_reset:
            restart = new_state.done
            new_state, memory = jax.tree.map(lambda first, now: jnp.where(restart, first, now),
                                             (initial, fresh_memory), (new_state, memory))
            log_post = jnp.where(restart, init[1], log_post)
        return (new_state, log_post, memory), (record, helper_action, posterior_true)

    initial = state
    init = (state, jnp.log(start_order_prior(state, params)) if ordering_prior
            else jnp.zeros(num_goals), fresh_memory)
    (final, _, _), (record, helper_actions, posterior_true) = jax.lax.scan(
        body, init, jnp.arange(horizon))
    pos, holding, last, helper_holding, helper_pos, obj_pos, action, valid = record
    trajectory = Trajectory(layout=state.layout, human_pos=pos, human_holding=holding,
                            human_last_action=last, helper_holding=helper_holding,
                            helper_pos=helper_pos, obj_pos=obj_pos, action=action, valid=valid)
    return final, trajectory, helper_actions, posterior_true


def state_at(initial: EnvState, trajectory: Trajectory, t: int) -> EnvState:
    """The state an unbatched episode was in before its step `t` (0-based), rebuilt from the
    recorded trajectory: for transcripts, prompts and frames at any point of an episode.
    (The helper's stay counter is not recorded and restarts at 0.)"""
    length = int(np.asarray(trajectory.valid).sum())
    if not 0 <= t < length:
        raise ValueError(f"step {t} is outside the episode's {length} recorded steps")
    at = lambda x: x[t]  # noqa: E731
    return initial.replace(
        human_pos=at(trajectory.human_pos), human_holding=at(trajectory.human_holding),
        human_last_action=at(trajectory.human_last_action),
        helper_pos=at(trajectory.helper_pos), helper_holding=at(trajectory.helper_holding),
        obj_pos=at(trajectory.obj_pos), time=jnp.int32(t), done=jnp.array(False))


@functools.partial(jax.jit, static_argnames=("params", "helper", "horizon", "track_posterior",
                                             "bip_particles", "auto_reset", "ordering_prior"))
def rollout_batch(keys: jax.Array, states: EnvState, params: EnvParams, helper: str = "stay",
                  horizon: int | None = None, track_posterior: bool = False,
                  bip_particles: int = 0, auto_reset: bool = False, ordering_prior: bool = True):
    """`rollout` vmapped over a batch of episodes (leading axis of `keys` and `states`)."""
    fn = functools.partial(rollout.__wrapped__, params=params, helper=helper, horizon=horizon,
                           track_posterior=track_posterior, bip_particles=bip_particles,
                           auto_reset=auto_reset, ordering_prior=ordering_prior)
    return jax.vmap(fn)(keys, states)


@functools.partial(jax.jit, static_argnames=("params", "num_episodes"))
def reset_batch(key: jax.Array, params: EnvParams, num_episodes: int) -> EnvState:
    """`num_episodes` random episodes (the `reset` of each split key)."""
    return jax.vmap(lambda k: env.reset(k, params)[1])(jax.random.split(key, num_episodes))


def completion_time(final: EnvState) -> jnp.ndarray:
    """Steps taken: the time at which the episode finished (max_steps if it never did)."""
    return final.time


def speedup(time_human: jnp.ndarray, time_collab: jnp.ndarray) -> jnp.ndarray:
    """T_human / T_collab - 1 per episode (MindZero eq. 5)."""
    return time_human / time_collab - 1.0


def simulate(key: jax.Array, params: EnvParams, helpers=HELPERS, num_episodes: int = 100,
             seeds=(10, 20, 30), states: EnvState | None = None,
             track_posterior: bool = True) -> dict:
    """Speedup of each helper over the stationary baseline on the same episodes and seeds.

    Episodes come from `key` (or `states`); each seed drives the agents' randomness. Returns,
    per helper, `speedup` [seeds, episodes], the mean, its standard error over episodes, and
    the mean posterior probability of the true goal (exact inference) over the steps taken
    (`track_posterior`; off, the baseline rollout skips the exact inference).
    """
    for helper in helpers:
        _check_helper(helper)
    if states is None:
        states = reset_batch(key, params, num_episodes)
    num_episodes = states.time.shape[0]
    results: dict = {}
    # every seed in one batch (seed-major rows, each seed's keys as `split(key(seed), E)`):
    # one call per helper, and the rows and program of the model helpers' own baseline
    keys = jnp.concatenate([jax.random.split(jax.random.key(s), num_episodes) for s in seeds])
    tiled = jax.tree.map(lambda x: jnp.concatenate([x] * len(seeds)), states)
    times: dict[str, np.ndarray] = {}
    posteriors = None
    for helper in sorted(set(helpers) | {"stay"}):
        track = track_posterior and helper == "stay"
        final, traj, _, post = rollout_batch(keys, tiled, params, helper, track_posterior=track)
        times[helper] = np.asarray(completion_time(final)).reshape(len(seeds), num_episodes)
        if track:
            valid = np.asarray(traj.valid)
            posteriors = (np.asarray(post) * valid).sum(1) / np.maximum(valid.sum(1), 1)
    baseline = times["stay"].astype(np.float64)
    for helper in helpers:
        collab = times[helper].astype(np.float64)
        values = np.asarray(speedup(baseline, collab))
        per_episode = values.mean(0)
        results[helper] = {
            "speedup": values,
            "mean": float(values.mean()),
            "sem": float(per_episode.std(ddof=1) / np.sqrt(num_episodes)) if num_episodes > 1 else 0.0,
            "mean_steps": float(collab.mean()),
        }
    results["baseline_mean_steps"] = float(baseline.mean())
    if track_posterior:
        results["true_goal_posterior"] = float(np.mean(posteriors))
    return results
