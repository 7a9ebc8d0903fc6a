"""Proactive assistance driven online by a model's particles (MindZero section 5.2, Table 1a).

All episodes x seeds run as one batch: at each step the rows whose human just did something
other than pause (and that have not finished) re-query the model in one sampler call (every
row, with `refresh_on_pause`); the helper is `gridworld.helper.act` on the latest particles,
with the same rules and memory as the gridworld's oracle and BIP helpers (a parsed answer is a
refresh), and stays until a first valid belief exists. The human acts with `random_prob`
randomness, drawing its keys exactly as `simulation.rollout` does, so the stationary-helper
baseline from `rollout_batch(..., "stay")` sees the same human randomness. Speedup = T_stay / T_collab - 1 per episode and seed.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld import env
from jaxtom.gridworld import helper as helper_lib
from jaxtom.gridworld.simulation import rollout_batch
from jaxtom.gridworld.text import object_label
from jaxtom.gridworld.types import STAY, EnvParams, EnvState, goal_index
from jaxtom.mindzero.particles import parse_particles


@functools.partial(jax.jit, static_argnames=("params",))
def _assist_step(keys, t, states: EnvState, memory, goals, probs, has_belief, fresh,
                 params: EnvParams):
    def one(key, state, mem, g, p, has, new):
        k_human, k_helper = jax.random.split(jax.random.fold_in(key, t))
        human = env.sample_human_action(k_human, state, params)
        decision = helper_lib.act(k_helper, state, mem, g, p, params, refresh=new)
        helper = jnp.where(has, decision.action, STAY)
        teleport = jnp.where(has, decision.teleport, -1)
        mem = jax.tree.map(lambda a, b: jnp.where(has, a, b), decision.memory, mem)
        return env.transition(state, human, helper, params, teleport), mem
    return jax.vmap(one)(keys, states, memory, goals, probs, has_belief, fresh)


@dataclasses.dataclass
class LiveView:
    """The recorded history of live rows, shaped like `HostEpisodes` for the observations;
    `now` holds the live states at step `t_now` (what a picture shows), copied to the host
    on the first `state` call of a step (text observations never need it)."""
    labels: list
    dist: np.ndarray
    obj_cell: np.ndarray
    human_cell: np.ndarray
    holding: np.ndarray
    start_cell: np.ndarray
    length: np.ndarray
    now: EnvState | None = None
    t_now: int = -1
    _host: EnvState | None = None

    def at(self, live: EnvState, t: int) -> None:
        self.now, self.t_now, self._host = live, t, None

    def distances(self, e, t):
        return self.dist[e, self.human_cell[e, t], self.obj_cell[e, t]].astype(int)

    def check_step(self, e, t):
        if t < 1:
            raise ValueError("a live row is queried after its first action")

    def state(self, e, t):
        """Row e's live state before action index t: only the current step is kept."""
        self.check_step(e, t)
        if t != self.t_now or self.now is None:
            raise ValueError(f"live row {e}: step {t} asked, the live states are at step "
                             f"{self.t_now}")
        if self._host is None:
            self._host = jax.device_get(self.now)
        return jax.tree.map(lambda x: x[e], self._host)


def _tile(tree, reps: int):
    return jax.tree.map(lambda x: jnp.concatenate([x] * reps), tree)


def assist(queries, states: EnvState, params: EnvParams, *, seeds=(10, 20, 30),
           num_particles: int = 2, max_new_tokens: int = 64, temperature: float = 0.0):
    """Runs the helper driven by a model (asked through `queries`: `evaluate.TextQueries`
    or `vl_eval.VLQueries`) on every episode x seed; returns speedups [S, E], the
    (row, t, correct) log of the argmax particle, and tokens per query."""
    if getattr(queries, "observation", None) == "figure":
        raise ValueError("online assistance renders the compact observations and the picture; "
                         "the figure transcript needs each live row's whole trajectory")
    E, S, W = int(states.time.shape[0]), len(seeds), params.width
    rows = S * E
    keys = jnp.concatenate([jax.random.split(jax.random.key(s), E) for s in seeds])
    live = _tile(states, S)
    base_final, _, _, _ = rollout_batch(keys, live, params, "stay")
    loop_keys = jax.vmap(lambda k: jax.random.split(k)[1])(keys)  # as rollout: k_random, key
    color, shape = np.asarray(live.obj_color), np.asarray(live.obj_shape)
    cell = lambda p: p[..., 1] * W + p[..., 0]  # noqa: E731
    T = params.max_steps + 1
    view = LiveView(labels=[[object_label(c, k) for c, k in zip(cs, ks)]
                            for cs, ks in zip(color, shape)],
                    dist=np.asarray(live.layout.dist), obj_cell=np.zeros((rows, T, 8), int),
                    human_cell=np.zeros((rows, T), int), holding=np.zeros((rows, T), int),
                    start_cell=cell(np.asarray(live.human_start)), length=np.full(rows, T))
    goals = np.zeros((rows, num_particles, 2), np.int32)
    goals[..., 1] = 1
    probs = np.zeros((rows, num_particles), np.float32)
    has = np.zeros(rows, bool)
    memory = jax.vmap(lambda _: helper_lib.init_memory(num_particles, params))(jnp.arange(rows))
    true = np.array([int(goal_index(a, b, 8)) for a, b in np.asarray(live.goal)])
    log, tokens = [], []
    for t in range(params.max_steps):
        host = jax.device_get((live.human_pos, live.obj_pos, live.human_holding,
                               live.human_last_action, live.done))
        pos, obj, holding, last, done = host
        if done.all():
            break
        view.human_cell[:, t], view.obj_cell[:, t], view.holding[:, t] = (
            cell(pos), cell(obj), holding)
        fresh = np.zeros(rows, bool)
        asks = (last != STAY) | params.refresh_on_pause
        need = np.flatnonzero(~done & asks) if t >= 1 else np.array([], int)
        if len(need):
            view.at(live, t)
            texts, n_tok = queries.ask(view, [(r, t) for r in need], key=jax.random.key(t),
                                       temperature=temperature, max_new_tokens=max_new_tokens)
            tokens.extend(n_tok.tolist())
            for r, text in zip(need, texts):
                parsed = parse_particles(text, view.labels[r], mode="eval",
                                         num_particles=num_particles)
                if parsed.ok:
                    goals[r] = 0
                    probs[r] = 0.0
                    goals[r, :, 1] = 1
                    for i, ((a, b), q) in enumerate(zip(parsed.pairs, parsed.q)):
                        goals[r, i] = (a, b)
                        probs[r, i] = q
                    has[r] = fresh[r] = True
        for r in np.flatnonzero(~done & has):
            best = int(np.argmax(probs[r]))
            log.append((r, t, int(goal_index(*goals[r, best], 8)) == true[r]))
        live, memory = _assist_step(loop_keys, jnp.int32(t), live, memory, jnp.asarray(goals),
                                    jnp.asarray(probs), jnp.asarray(has), jnp.asarray(fresh),
                                    params)
    t_collab = np.asarray(live.time, np.float64).reshape(S, E)
    t_base = np.asarray(base_final.time, np.float64).reshape(S, E)
    return {"speedup": t_base / t_collab - 1.0, "t_collab": t_collab, "t_base": t_base,
            "log": np.array(log).reshape(-1, 3), "tokens": np.array(tokens)}
