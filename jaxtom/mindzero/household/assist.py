"""Household proactive assistance (MindZero section 5.4, Table 1b): the human and a helper act
simultaneously in one apartment; the helper turns a goal belief into grab-and-put actions with
O-WAH's GnP rules (`helper_beliefs.gnp_decide`: grab the most likely still-needed type at
P >= 0.7, put at the most likely target at P >= 0.5, commitments kept until the helper's hand
state changes); speedup = T_human / T_collab - 1 (`evaluate_assist`).

Belief sources (`BeliefSource`: `reset(task, rng)` per run, then `__call__(ctx)` -> particles
or None to keep the last belief):
- `Oracle`: the true goal from the first step (upper bound).
- `RandomGoal`: one O-WAH random goal per run (1-3 predicates, counts 1-6).
- `ExactPosterior`: the posterior over the task generator's goal space (`goal_space`) under the
  human's exact action distribution (goals below 1e-20 of the best dropped), top 10.
- `SMC`: AutoToM's sequential Monte Carlo (`helper_beliefs.SMCBelief`): refills from proposals
  drawn from the prior restricted to goals consistent with the observed puts, reweights by the
  one-step symbolic likelihood of the human's latest action.
- `ModelBelief(propose)`: the hook for a trained policy: `propose(ctx) -> [(Goal, p)]`;
  `PolicyBelief(model, codec, observation=...)` is that hook for a jaxtom policy (the training
  data's prompt, Figure 9 particles parsed leniently, TFLOPs counted per run).
`ctx` is an `AssistContext`: the run so far (states, the human's beliefs and actions, the
helper's actions; `ctx.episode()` is the human's side as an `episodes.Episode` for the prompt
renderers; `ctx.task` is read by the oracle only). The human's recorded action is the one it
chose (its intent); when the helper took the object first it had no effect.

Model-driven and inferred beliefs start after the human's first put (the public code's
`--gnp_start_at_put`) and refresh every step except when the human's last two actions are
the same walk; the oracle acts from the start. The helper sees the whole apartment (O-WAH's
default full observation); the human has the partial view by default, as the paper's domain
(section 5.3; O-WAH's evaluation ran full, its `--obs_type=partial` commented out), under
which opening containers alone helps a searching person; `AssistConfig.human` with
`full_observation=True` gives it the whole apartment. Both act on the same state; the two actions apply
in a random order, and one that has become illegal (the other agent took the object) is a
wait. `jaxtom eval`'s table is `evaluate_assist.evaluate_run_assistance`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Callable

import jax
import numpy as np

from jaxtom import flops
from jaxtom.household import catalog
from jaxtom.household.episodes import MAX_STEPS, Episode, run_human
from jaxtom.household.goals import Goal
from jaxtom.household.helper_beliefs import (
    Commitment,
    GnPConfig,
    Particles,
    SMCBelief,
    SMCConfig,
    gnp_decide,
    normalise,
    random_goal,
)
from jaxtom.household.human import (
    HumanParams,
    action_distribution,
    action_probability,
    initial_belief,
    sample_action,
    update_belief,
)
from jaxtom.household.tasks import Task, task_state
from jaxtom.household.world import (
    HELD,
    NOBODY,
    WAIT,
    Action,
    ActionError,
    State,
    grab,
    is_done,
    observe,
    open_,
    put,
    step,
    walk_to,
)
from jaxtom.mindzero.household.data import get_observation, goal_support, support_log_prior
from jaxtom.mindzero.household.particles import parse_particles
from jaxtom.sampling.sampler import generate

HUMAN, HELPER = 0, 1


# --- the context a belief source sees -------------------------------------------------------
@dataclasses.dataclass
class AssistContext:
    """The run so far: `states[t]` before the t-th joint step (the last is now), the human's
    actions and beliefs, the helper's actions; `task` is available for the oracle only."""
    task: Task
    params: HumanParams
    states: list
    beliefs: list
    human_actions: list
    helper_actions: list

    @property
    def t(self) -> int:
        return len(self.human_actions)

    def episode(self) -> Episode:
        """The human's side as an `Episode` (the prompt renderers' input)."""
        return Episode(self.task, self.params, tuple(self.human_actions), tuple(self.states),
                       tuple(self.beliefs), seed=-1)

    def puts(self) -> list[tuple[str, str]]:
        """(object type, target furniture type) of every human put so far."""
        out = []
        for s, a in zip(self.states, self.human_actions):
            if a.verb in ("putin", "putback"):
                out.append((s.object_types[a.obj], s.apartment.piece(a.furniture).type))
        return out


class BeliefSource:
    name = "belief"
    start_at_put = True

    def reset(self, task: Task, rng: np.random.Generator) -> None:
        pass

    def observe(self, ctx: AssistContext) -> None:
        """Called after every joint step (for sources that accumulate evidence)."""

    def __call__(self, ctx: AssistContext):
        raise NotImplementedError


class Oracle(BeliefSource):
    name, start_at_put = "oracle (true goal)", False

    def __call__(self, ctx):
        return [(ctx.task.goal, 1.0)]


class RandomGoal(BeliefSource):
    name = "random goal"

    def reset(self, task, rng):
        self.goal = random_goal(rng)

    def __call__(self, ctx):
        return [(self.goal, 1.0)]


class ModelBelief(BeliefSource):
    """A trained policy's particles: `propose(ctx)` returns [(Goal, p)] or None (a failed
    parse keeps the previous belief). `tflops` is what the table reports per episode."""

    def __init__(self, propose: Callable, name: str = "model", tflops: float | None = None):
        self.propose, self.name, self.tflops = propose, name, tflops

    def __call__(self, ctx):
        out = self.propose(ctx)
        return normalise(out) if out else None


class PolicyBelief(ModelBelief):
    """A policy model proposing Figure 9 particles at every refresh: the prompt is the
    training data's observation (`data.get_observation(observation)` on `ctx.episode()` at
    `ctx.t`), the completion is parsed leniently (`particles.parse_particles`, eval mode); a
    failed parse keeps the previous belief. `sample(prompt_ids, call) -> token ids` defaults to
    `jaxtom.sampling.sampler.generate` (temperature 0.6 as the public evaluation). `tflops` is
    2 x active parameters x the mean tokens (prompt + completion) per run, in TFLOPs."""

    def __init__(self, model, codec, *, name: str = "MindZero", observation: str = "compact",
                 num_particles: int = 10, max_new_tokens: int = 256, temperature: float = 0.6,
                 seed: int = 0, sample: Callable | None = None):
        self.propose, self.name = self._propose, name
        self.model, self.codec, self.observation = model, codec, observation
        self.num_particles, self.max_new_tokens = num_particles, max_new_tokens
        self.temperature, self.seed = temperature, seed
        self.sample = sample or self._generate
        self.run_tokens: list[int] = []
        self.calls = 0

    def reset(self, task, rng):
        self.run_tokens.append(0)

    def _generate(self, prompt_ids, call):

        key = jax.random.fold_in(jax.random.key(self.seed), call)
        out = generate(self.model, [prompt_ids], max_new_tokens=self.max_new_tokens,
                       temperature=self.temperature, key=key, stop=list(self.codec.eos_ids),
                       pad_id=self.codec.pad_id)
        return out.sequences()[0]

    def _propose(self, ctx):
        prompt = self.codec.prompt_ids(get_observation(self.observation)(
            ctx.episode(), ctx.t, self.num_particles))
        completion = self.sample(prompt, self.calls)
        self.calls += 1
        if self.run_tokens:
            self.run_tokens[-1] += len(prompt) + len(completion)
        parsed = parse_particles(self.codec.decode(completion), mode="eval",
                                 num_particles=self.num_particles)
        return list(zip(parsed.goals, parsed.probs)) if parsed.ok else None

    @property
    def tflops(self):
        if not self.run_tokens or self.model is None:
            return None
        return flops.inference_tflops(flops.active_params(self.model),
                                      float(np.mean(self.run_tokens)))


# --- the goal space and the symbolic likelihood -----------------------------------------------
def goal_space(apartment) -> list[Goal]:
    """Every goal the task generator can draw in `apartment` (`data.goal_support`, ~660)."""
    return list(goal_support(apartment))


def goal_prior(goals: list[Goal]) -> np.ndarray:
    """The generator's shape on the goal space (`data.support_log_prior`: tasks uniform,
    goals uniform within their task), normalised."""
    w = np.exp(support_log_prior(goals))
    return w / w.sum()


def step_likelihood(ctx: AssistContext, goal: Goal, t: int | None = None) -> float:
    """P(the human's t-th action | goal, state_t, belief_t) (default: the latest)."""
    t = ctx.t - 1 if t is None else t
    return action_probability(ctx.states[t], ctx.beliefs[t], goal, ctx.human_actions[t],
                              ctx.params, HUMAN)


def consistent(goal: Goal, puts: list[tuple[str, str]]) -> bool:
    """Whether every observed put is to the goal's target type and of a goal type, in no more
    than the goal's count."""
    done = Counter(k for k, target in puts if target == goal.target)
    if any(target != goal.target for _, target in puts):
        return False
    return all(goal.count(k) >= n for k, n in done.items())


class ExactPosterior(BeliefSource):
    """The posterior over `goal_space` (prior `goal_prior`) under the human's exact policy,
    accumulated from the first human action; the helper reads its top `top_k` goals
    (renormalised). Goals whose posterior falls below `prune` (relative to the best) are
    dropped for good (`prune=0`: none, the exact posterior; the default 1e-20 leaves the top
    of the distribution unchanged in practice and makes a run much faster)."""
    name = "exact posterior"

    def __init__(self, top_k: int = 10, prune: float = 1e-20, floor: float = 1e-300):
        self.top_k, self.floor = top_k, floor
        self.cut = math.log(prune) if prune > 0 else -math.inf

    def reset(self, task, rng):
        self.goals = goal_space(task.apartment)
        self.log_post = np.log(goal_prior(self.goals))
        self.seen = 0

    def observe(self, ctx):
        while self.seen < ctx.t:
            t = self.seen
            alive = np.flatnonzero(np.isfinite(self.log_post))
            for i in alive:
                p = step_likelihood(ctx, self.goals[i], t)
                self.log_post[i] += math.log(max(p, self.floor))
            self.log_post[self.log_post < self.log_post.max() + self.cut] = -np.inf
            self.seen += 1

    def posterior(self) -> np.ndarray:
        w = np.exp(self.log_post - self.log_post.max())
        return w / w.sum()

    def __call__(self, ctx):
        post = self.posterior()
        top = np.argsort(-post, kind="stable")[: self.top_k]
        return normalise((self.goals[i], post[i]) for i in top)


class SMC(BeliefSource):
    """AutoToM's SMC over goals with the symbolic one-step likelihood; proposals are
    `num_proposals` goals drawn from the prior restricted to goals consistent with the puts."""
    name = "SMC (symbolic likelihood)"

    def __init__(self, cfg: SMCConfig = SMCConfig()):
        self.cfg = cfg

    def reset(self, task, rng):
        self.rng = rng
        self.goals = goal_space(task.apartment)
        self.prior = goal_prior(self.goals)
        self.belief = SMCBelief(self.cfg)

    def propose(self, ctx) -> list[Goal]:
        puts = ctx.puts()
        ok = np.array([consistent(g, puts) for g in self.goals])
        w = np.where(ok, self.prior, 0.0)
        if w.sum() <= 0:
            w = self.prior
        n = min(self.cfg.num_particles, int((w > 0).sum()))
        pick = self.rng.choice(len(self.goals), size=n, replace=False, p=w / w.sum())
        return [self.goals[i] for i in pick]

    def __call__(self, ctx):
        proposals = self.propose(ctx) if len(self.belief.weights) < self.cfg.num_particles \
            else []
        self.belief.update(proposals, lambda g: step_likelihood(ctx, g))
        return self.belief.particles()


# --- the helper ------------------------------------------------------------------------------
@dataclasses.dataclass
class HelperMemory:
    particles: Particles = dataclasses.field(default_factory=list)
    commitment: Commitment = Commitment()
    hands: tuple = (NOBODY, NOBODY)  # the hand state the commitment was made in
    human_grabbed: set = dataclasses.field(default_factory=set)


def delivered_and_held(state: State) -> tuple[Counter, Counter]:
    """(objects per (type, furniture type) for every goal target, types in anyone's hands)."""
    delivered, held = Counter(), Counter()
    apt = state.apartment
    for kind, loc in zip(state.object_types, state.object_loc):
        if loc == HELD:
            held[kind] += 1
        elif apt.piece(loc).type in catalog.TARGETS:
            delivered[(kind, apt.piece(loc).type)] += 1
    return delivered, held


def _walk_cost(state: State, me, fid: int) -> float:
    piece = state.apartment.piece(fid)
    if me.close_to == fid:
        return 0.0
    return state.apartment.path_length(me.pos, piece.position, piece.room)


def _approach(state: State, me, fid: int, then: Action) -> Action:
    if me.close_to != fid:
        return walk_to(fid)
    piece = state.apartment.piece(fid)
    if piece.is_container and fid not in state.open:
        return open_(fid)
    return then


def helper_action(state: State, memory: HelperMemory, gnp: GnPConfig = GnPConfig()) -> Action:
    """The helper's next action under its commitment (re-decided from its particles when idle
    or when its hand state changed)."""
    me = state.agents[HELPER]
    delivered, held = delivered_and_held(state)
    if memory.commitment.kind is None or me.hands != memory.hands:
        holding = state.object_types[me.holding[0]] if me.holding else None
        memory.commitment = gnp_decide(memory.particles, holding, delivered, held, gnp)
        memory.hands = me.hands
    c = memory.commitment
    apt = state.apartment
    if c.kind == "grab" and me.free_hand:
        bad_targets = {g.target for g, p in memory.particles if p > 0 and g.count(c.what)}
        options = [(o, loc) for o, (kind, loc) in enumerate(zip(state.object_types,
                                                                   state.object_loc))
                   if kind == c.what and loc != HELD and o not in memory.human_grabbed
                   and apt.piece(loc).type not in bad_targets]
        if options:
            o, loc = min(options, key=lambda ol: (_walk_cost(state, me, ol[1]), ol[0]))
            return _approach(state, me, loc, grab(o))
        return WAIT
    if c.kind == "put" and me.holding:
        pieces = apt.furniture_of_type(c.what)
        if pieces:
            fid = min(pieces, key=lambda f: (_walk_cost(state, me, f), f))
            return _approach(state, me, fid, put(me.holding[0], apt.piece(fid)))
    return WAIT


# --- one run ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AssistConfig:
    """`human`: the person's parameters. The default observes partially, as the paper's
    domain (section 5.3; O-WAH's evaluation ran full, its `--obs_type=partial` commented
    out): any helper that opens containers then shows the searching person what is inside,
    so even a random-goal helper speeds it up."""
    max_steps: int = MAX_STEPS
    gnp: GnPConfig = GnPConfig()
    human: HumanParams = HumanParams()


def _refresh_due(ctx: AssistContext, source: BeliefSource, cfg: AssistConfig) -> bool:
    if source.start_at_put and cfg.gnp.start_at_put and not ctx.puts():
        return False
    acts = ctx.human_actions
    return not (len(acts) >= 2 and acts[-1] == acts[-2] and acts[-1].verb == "walk")


def run_assisted(task: Task, source: BeliefSource | None, seed: int,
                 cfg: AssistConfig = AssistConfig()) -> dict:
    """One run of the human with the helper driven by `source` (None: the human alone, as
    `episodes.run_human`). Returns steps taken (`max_steps` if unfinished), `done`, the
    helper's useful deliveries and the number of belief refreshes."""
    if source is None:
        ep = run_human(task, cfg.human, seed, cfg.max_steps)
        return {"steps": ep.length, "done": ep.done, "refreshes": 0}
    rng = np.random.default_rng([seed, 104729])
    source.reset(task, np.random.default_rng([seed, 15485863]))
    state = task_state(task, with_helper=True)
    belief = initial_belief(state, HUMAN, cfg.human.full_observation)
    ctx = AssistContext(task, cfg.human, [state], [belief], [], [])
    memory = HelperMemory()
    refreshes = 0
    while ctx.t < cfg.max_steps and not is_done(state, task.goal):
        if _refresh_due(ctx, source, cfg):
            particles = source(ctx)
            if particles is not None:
                memory.particles = particles
                refreshes += 1
        human = sample_action(action_distribution(state, belief, task.goal, cfg.human, HUMAN),
                              rng)
        helper = helper_action(state, memory, cfg.gnp)
        order = ((HUMAN, human), (HELPER, helper))
        if rng.random() < 0.5:
            order = order[::-1]
        done_helper = WAIT
        for agent, action in order:
            try:
                state = step(state, agent, action, cfg.human.walk_metres)
                if agent == HELPER:
                    done_helper = action
            except ActionError:  # the other agent took the object first: a wait
                pass
        if human.verb == "grab":
            memory.human_grabbed.add(human.obj)
        belief = update_belief(belief, observe(state, HUMAN, cfg.human.full_observation))
        ctx.human_actions.append(human)
        ctx.helper_actions.append(done_helper)
        ctx.states.append(state)
        ctx.beliefs.append(belief)
        source.observe(ctx)
    return {"steps": ctx.t, "done": is_done(state, task.goal), "refreshes": refreshes}


__all__ = ["AssistConfig", "AssistContext", "BeliefSource", "ExactPosterior", "HelperMemory",
           "ModelBelief", "Oracle", "PolicyBelief", "RandomGoal", "SMC", "consistent",
           "delivered_and_held",
           "goal_prior", "goal_space", "helper_action", "run_assisted",
           "step_likelihood"]

