"""The Construction gridworld of MindZero (sections 5.1-5.2, appendix B) in pure JAX.

A human (green) carries one object next to another on a 10x10 grid with walls while a helper
(red) tries to speed it up. Everything is a pure function over `flax.struct` pytrees, jit- and
vmap-able, with static sizes in the hashable `EnvParams`.

Environment
    `EnvParams`, `EnvState`, `Observation`, `reset(key, params)`,
    `step(key, state, helper_action, params) -> (obs, state, reward, done, info)` (the
    simulated human acts inside the step), `transition` (both agents' actions, no
    randomness), `state_from_ascii`, `parse_ascii`.
Goals
    56 ordered pairs `(object1, object2)`: object1 is picked first and put next to object2;
    `goal_pairs`, `goal_index`.
Inference (the planner likelihood of the MindZero reward, and Bayesian inverse planning)
    `Trajectory`, `goal_log_likelihoods(trajectory, params) -> [..., T, 56]` per-step
    `log P(a_t | g, s_t)`, `goal_posterior(trajectory, params, prior=None) -> [..., T, 56]`,
    `start_order_prior`.
Agents and rollouts
    `rollout` / `rollout_batch` (helpers `oracle`, `bip`, `random`, `stay`), `simulate` (speedup
    over the stationary helper, seeds 10/20/30), `state_at`, `sample_helper_action`
    (drive the helper from any goal distribution, e.g. a language model's particles).
The helper
    `jaxtom.gridworld.helper`: the planner's Boltzmann policy over Q(a) = sum_i p_i V(a | g_i)
    plus the public MindZero code's rules, set in `EnvParams`: no pick while the human is
    within 3 path steps of the object; holding an object, put it down (and give it up) when
    the human is 1 path step away, stay at 2; a random move after 2 stays in a row; the belief
    refreshed (inference re-run, model re-queried) only after a human action other than a
    pause; optionally teleport (`teleport_after`, on at 3 in `jaxtom gridworld simulate` and in
    MindZero's assistance evaluation, as in the public code's evaluation). The model-driven
    helper (`jaxtom.mindzero.assist`) runs the same code.
Data
    `generate_episodes`, `train_test_episodes` (800/100, held-out labels and layouts),
    `make_questions` / `qa_episodes` (QA types 1-3), `accuracy`.
Observations
    `render_rgb` (jit-able image), `render_text` (Figure 11 transcript), `qa_prompt`
    (Figure 6), `assistance_prompt` (Figure 7).
Reference
    `jaxtom.gridworld.reference`: plain NumPy/Python oracle used by the tests and benchmark.
"""

from jaxtom.gridworld.env import (
    init_state, reset, sample_helper_action, sample_human_action, state_from_ascii, step,
    transition,
)
from jaxtom.gridworld.episodes import (
    EpisodeFilter, EpisodeSet, generate_episodes, split_params, train_test_episodes,
)
from jaxtom.gridworld.inference import (
    Trajectory, goal_log_likelihoods, goal_posterior, posterior_from_log_likelihoods,
    start_order_prior,
)
from jaxtom.gridworld.layout import parse_ascii
from jaxtom.gridworld.qa import Question, accuracy, make_questions, qa_episodes
from jaxtom.gridworld.render import render_rgb, save_gif, save_png
from jaxtom.gridworld.simulation import (
    HELPERS, reset_batch, rollout, rollout_batch, simulate, speedup, state_at,
)
from jaxtom.gridworld.text import assistance_prompt, qa_prompt, render_text
from jaxtom.gridworld.types import (
    ACTION_NAMES, COLORS, SHAPES, EnvParams, EnvState, Observation, goal_index, goal_pairs,
    observe,
)

__all__ = [
    "ACTION_NAMES", "COLORS", "HELPERS", "SHAPES", "EnvParams", "EnvState", "EpisodeFilter",
    "EpisodeSet", "Observation", "Question", "Trajectory", "accuracy", "assistance_prompt",
    "generate_episodes", "goal_index", "goal_log_likelihoods", "goal_pairs", "goal_posterior",
    "init_state", "make_questions", "observe", "parse_ascii", "posterior_from_log_likelihoods",
    "qa_episodes", "qa_prompt", "render_rgb", "render_text", "reset", "reset_batch", "rollout",
    "rollout_batch", "sample_helper_action", "sample_human_action", "save_gif", "save_png",
    "simulate", "speedup", "split_params", "start_order_prior", "state_at", "state_from_ascii",
    "step", "train_test_episodes", "transition",
]
