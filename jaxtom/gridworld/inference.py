"""Model-based goal inference: per-step action likelihoods under every ordered goal and the
exact Bayesian posterior (Bayesian inverse planning, MindZero eq. 1).

`goal_log_likelihoods` is the planner estimator of `log P(a_t | g, s_t)` that the MindZero
ELBO reward (eq. 4) sums over time. It models the carry-phase pause as part of the human's
policy, so pauses are informative instead of flattening every goal to the floor as in the
public reference code. Each step is floored at `likelihood_floor` so everything stays finite.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxtom.gridworld.likelihood import open_moves, steps_goal_log_likelihoods
from jaxtom.gridworld.planner import cell_of
from jaxtom.gridworld.types import EnvParams, EnvState, Layout, goal_pairs


@struct.dataclass
class Trajectory:
    """The human's behaviour in one episode: states before each action, and the actions.

    All fields but `layout` have a leading time axis T; `valid` masks steps after the end.
    """

    layout: Layout
    human_pos: jnp.ndarray  # int32 [T, 2]
    human_holding: jnp.ndarray  # int32 [T]
    human_last_action: jnp.ndarray  # int32 [T]
    helper_holding: jnp.ndarray  # int32 [T]
    helper_pos: jnp.ndarray  # int32 [T, 2] (not needed for inference; kept for replay/render)
    obj_pos: jnp.ndarray  # int32 [T, K, 2]
    action: jnp.ndarray  # int32 [T] the human's action at each step
    valid: jnp.ndarray  # bool [T]

    @property
    def length(self) -> jnp.ndarray:
        return self.valid.sum(-1)


def trajectory_step(state: EnvState, human_action, valid) -> Trajectory:
    """One time slice of a trajectory, recorded from the state the human acted in."""
    return Trajectory(layout=state.layout, human_pos=state.human_pos,
                      human_holding=state.human_holding,
                      human_last_action=state.human_last_action,
                      helper_holding=state.helper_holding, helper_pos=state.helper_pos,
                      obj_pos=state.obj_pos,
                      action=jnp.asarray(human_action, jnp.int32), valid=jnp.asarray(valid))


def step_goal_log_likelihoods(layout, human_pos, human_holding, last_action, helper_holding,
                              obj_pos, action, params: EnvParams) -> jnp.ndarray:
    """[G] floored log P(action | goal, state) for every ordered goal at one time step."""
    one = lambda x: jnp.asarray(x, jnp.int32)[None]  # noqa: E731
    return steps_goal_log_likelihoods(
        layout.dist.reshape(-1), open_moves(layout.next_cell), jnp.zeros(1, jnp.int32),
        one(human_pos), one(human_holding), one(last_action), one(helper_holding), one(obj_pos),
        one(action), jnp.ones(1, bool), params)[0]


EPISODE_CHUNK = 32


def _chunk_log_likelihoods(traj: Trajectory, params: EnvParams) -> jnp.ndarray:
    """[E, T, G] for E episodes: their steps go through `steps_goal_log_likelihoods` at once."""
    episodes, steps = traj.valid.shape
    flat = lambda x: x.reshape((episodes * steps,) + x.shape[2:])  # noqa: E731
    out = steps_goal_log_likelihoods(
        traj.layout.dist.reshape(-1), open_moves(traj.layout.next_cell).reshape(-1),
        jnp.repeat(jnp.arange(episodes, dtype=jnp.int32), steps), flat(traj.human_pos),
        flat(traj.human_holding), flat(traj.human_last_action), flat(traj.helper_holding),
        flat(traj.obj_pos), flat(traj.action), flat(traj.valid), params)
    return out.reshape(episodes, steps, -1)


def goal_log_likelihoods(trajectory: Trajectory, params: EnvParams) -> jnp.ndarray:
    """`[..., T, G]` per-step log-likelihoods of the human's actions under every ordered goal
    (G = K (K - 1) = 56); zero at invalid steps. Works on a single trajectory or any batch."""
    batch_shape = trajectory.valid.shape[:-1]
    lead = len(batch_shape)
    # host (NumPy) trajectories are moved to the device first: the remainder chunk below runs
    # outside lax.map, where NumPy inputs would stay NumPy arrays
    flat = jax.tree.map(lambda x: jnp.asarray(x).reshape((-1,) + x.shape[lead:]), trajectory)
    episodes = flat.valid.shape[0]
    # Episodes go through in chunks of EPISODE_CHUNK (lax.map over a leading chunk axis, which
    # is faster than a dynamic slice of the episode axis): the per-step intermediates then
    # stay in cache. A remainder chunk goes through on its own.
    chunk = min(EPISODE_CHUNK, episodes)
    whole = episodes - episodes % chunk
    parts = []
    if whole:
        chunks = jax.tree.map(lambda x: x[:whole].reshape((whole // chunk, chunk) + x.shape[1:]),
                              flat)
        out = jax.lax.map(lambda part: _chunk_log_likelihoods(part, params), chunks)
        parts.append(out.reshape((whole,) + out.shape[2:]))
    if whole < episodes:
        parts.append(_chunk_log_likelihoods(jax.tree.map(lambda x: x[whole:], flat), params))
    out = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return out.reshape(batch_shape + out.shape[1:])


def start_order_prior(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """[G] prior implied by the human's nearest-first rule: uniform over unordered pairs, each
    ordered with the object nearer (path distance, ties to the lower id) to the human's start
    first -- the same ordering the assistance prompt asks models to follow. Works batched."""
    goals = jnp.asarray(goal_pairs(params.num_objects))

    def one(layout, human_start, obj_pos):
        start = cell_of(human_start, params.width)
        d = layout.dist[start, cell_of(obj_pos, params.width)].astype(jnp.int32)
        d1, d2 = d[goals[:, 0]], d[goals[:, 1]]
        consistent = (d1 < d2) | ((d1 == d2) & (goals[:, 0] < goals[:, 1]))
        return consistent / consistent.sum()

    fn = one
    for _ in range(state.human_start.ndim - 1):
        fn = jax.vmap(fn)
    return fn(state.layout, state.human_start, state.obj_pos)


def posterior_from_log_likelihoods(step_log_liks: jnp.ndarray, prior=None) -> jnp.ndarray:
    """`P(goal | a_1:t)` for every t from per-step log-likelihoods `[..., T, G]`."""
    cumulative = jnp.cumsum(step_log_liks, axis=-2)
    if prior is None:
        return jax.nn.softmax(cumulative, axis=-1)
    log_prior = jnp.log(jnp.asarray(prior))[..., None, :]  # broadcast over time
    return jax.nn.softmax(cumulative + log_prior, axis=-1)


def goal_posterior(trajectory: Trajectory, params: EnvParams, prior=None) -> jnp.ndarray:
    """`[..., T, G]` exact posterior over ordered goals after each step (uniform prior unless
    given; `prior` is `[G]` or `[..., G]` per episode, e.g. `start_order_prior`)."""
    if prior is not None:
        prior = jnp.asarray(prior)
        if prior.shape[-1] != params.num_goals:
            raise ValueError(f"prior has {prior.shape[-1]} entries, expected {params.num_goals} "
                             "(one per ordered goal)")
    return posterior_from_log_likelihoods(goal_log_likelihoods(trajectory, params), prior)
