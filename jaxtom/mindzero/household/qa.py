"""Household question answering in the MMToM-QA style (MindZero section 5.3, appendix C.2),
generated from simulator episodes; binary options in random order, answers by MMToM-QA's rules
(notes section 5), label-free SSRL reward from the human planner.

A question is asked after the human's first `step` actions (the last one shown is
`actions[step - 1]`). Types (the belief object G is always a type the human still needs and
has too few known instances of, i.e. is searching for):
- 1.1 true belief: the human has just walked to a closed container C it has not looked into
  and opens it next; a G is in C. Options "thinks there is a G inside C" / "isn't"; answer
  inside.
- 1.2 false belief: the same with no G in C; answer inside.
- 1.3 long-term: the human opened C earlier while searching for G, found none, and has since
  walked on to search elsewhere (at least 3 actions later, away from C); answer not inside.
- 2.1 / 2.2 goal given true / false belief: as 1.1 / 1.2, options "trying to get G_u" (the
  unobserved type it is searching for, no instance known) and "G_o" (a type the human does
  not need and knows an instance of, away from the target); answer G_u.
- 2.3 goal given updated belief: the human walks to furniture F to grab a G_o it first saw
  during the episode; the other option is a type it has never observed and does not need;
  answer G_o.
- 2.4 goal given future actions: the human, at furniture F where it knows instances of two
  types (one it needs, G_n, and one it does not, G_x), grabs the G_n; the question is asked
  with that grab shown, so the action that follows the arrival decides between "trying to get
  G_n" and "G_x" (answer G_n), where the walk to F alone explained both. MMToM-QA's own
  generator is not public (notes section 5 names the type only); this is this library's
  reading of "given future actions" in its simulator.

The planner's own state answers every question (`planner_answer`): a belief question by whether
its belief leaves a G possible in C (C not looked into, or a G known there), a goal question by
which option it still needs. The SSRL reward (`option_log_likelihoods`, `rewards`) is
`log max(P(last action | the chosen option's belief and goal), 1e-7)` from the human's exact
action distribution under the option (`human.action_probability`; a planner proposal the real
state makes illegal, e.g. grabbing an object the option's belief wrongly places here, keeps its
mass off the observed action): goal = the option's (or the premise's) type, one more instance
than the human believes is at the task's target; belief = the human's own, with "inside C" as
a G it has not seen placed in C and "not inside C" as C looked into with no G.
No answer label enters it.

Text: `figure_question` is Figure 8 (the MMToM-QA paragraph of `text` on the start state, the
actions so far, the question, the `\\boxed{}` instruction); `compact_question` one short line
for a tiny model (only observed facts: where the last action went, whether C was opened
before, where each option type was seen).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxtom.household import catalog, text
from jaxtom.household.goals import Goal
from jaxtom.household.human import Belief, action_probability, needs
from jaxtom.mindzero.household.qa_answers import accuracy_by_type
from jaxtom.mindzero.household.qa_reward import QA_FLOOR, qa_reward
from jaxtom.household.world import HELD, State, open_

QUESTION_TYPES = ("1.1", "1.2", "1.3", "2.1", "2.2", "2.3", "2.4")
TYPE_NAMES = {"1.1": "true belief", "1.2": "false belief", "1.3": "long-term belief",
              "2.1": "goal, true belief", "2.2": "goal, false belief",
              "2.3": "goal, updated belief", "2.4": "goal, future actions"}
LONG_TERM_GAP = 3  # 1.3: at least this many actions since C was opened
NAME = "Mary"
INSTRUCTION = ("You FIRST think about the reasoning process as an internal monologue and then "
               "provide the final answer. The reasoning process MUST BE enclosed within "
               "<thinking> </thinking> tags. The final answer MUST BE put in \\boxed{}.")


@dataclasses.dataclass(frozen=True)
class Question:
    episode: int  # index into the episode list
    step: int  # actions[:step] are shown; the last is actions[step - 1]
    qtype: str  # one of QUESTION_TYPES
    options: tuple[str, str]  # belief: ("inside", "not inside") in some order; goal: 2 types
    answer: int  # 0 for (a), 1 for (b)
    obj: str = ""  # belief questions: the premise type G
    container: int = -1  # belief questions: the container C (furniture id)
    log_lik: tuple[float, float] = (0.0, 0.0)  # log P(last action | option), unfloored

    @property
    def is_belief(self) -> bool:
        return self.qtype.startswith("1.")

    @property
    def answer_letter(self) -> str:
        return "ab"[self.answer]


# --- what the human knows --------------------------------------------------------------------
def known_available(state: State, belief: Belief, goal: Goal, kind: str) -> int:
    """Instances of `kind` the human knows of and could fetch (not held, not at a target
    instance, not believed held by another agent)."""
    targets = set(state.apartment.furniture_of_type(goal.target))
    held = dict(belief.holders)
    return sum(1 for o, loc in belief.known if state.object_types[o] == kind and loc != HELD
               and loc not in targets and o not in held)


def searching(state: State, belief: Belief, goal: Goal) -> list[str]:
    """Types the human needs and has too few known instances of (what a search is for)."""
    return sorted(k for k, n in needs(state, belief, goal).items()
                  if known_available(state, belief, goal, k) < n)


def _known_types(state: State, belief: Belief) -> set[str]:
    return {state.object_types[o] for o, _ in belief.known}


def _g_in(state: State, kind: str, fid: int) -> bool:
    return any(state.object_types[o] == kind for o in state.contents[fid])


def thinks_possible(state: State, belief: Belief, kind: str, fid: int) -> bool:
    """Whether the belief leaves a `kind` possible in `fid`: it has not looked into it, or it
    knows one there."""
    return fid not in belief.seen or any(
        state.object_types[o] == kind for o in belief.believed_at(fid))


# --- option beliefs and the reward --------------------------------------------------------------
def option_goal(state: State, belief: Belief, goal: Goal, kind: str) -> Goal:
    """'Trying to get a `kind`': one more instance than the human believes is already at the
    task's target."""
    targets = set(state.apartment.furniture_of_type(goal.target))
    there = sum(1 for o, loc in belief.known if loc in targets and state.object_types[o] == kind)
    return Goal.make(goal.task_name, {kind: there + 1}, goal.target)


def belief_with(state: State, belief: Belief, kind: str, fid: int, inside: bool) -> Belief:
    """The human's belief with a `kind` believed in `fid` (an instance it has not seen, else
    any not already there), or with `fid` looked into and no `kind` there."""
    known = dict(belief.known)
    if inside:
        same = [o for o, k in enumerate(state.object_types) if k == kind]
        unseen = [o for o in same if o not in known]
        movable = unseen or [o for o in same if known.get(o) not in (fid, HELD)]
        if movable and not any(state.object_types[o] == kind for o in belief.believed_at(fid)):
            known[movable[0]] = fid
        seen = belief.seen
    else:
        known = {o: loc for o, loc in known.items()
                 if not (loc == fid and state.object_types[o] == kind)}
        seen = belief.seen | {fid}
    return Belief(tuple(sorted(known.items())), belief.holders, frozenset(seen), belief.visited)


def option_log_likelihoods(episode, q_step: int, qtype: str, options, obj: str = "",
                           container: int = -1) -> tuple[float, float]:
    """log P(actions[step - 1] | state, option belief, option goal) for both options."""
    t = q_step - 1
    state, belief, action = episode.states[t], episode.beliefs[t], episode.actions[t]
    out = []
    for option in options:
        if qtype.startswith("1."):
            b = belief_with(state, belief, obj, container, option == "inside")
            g = option_goal(state, belief, episode.goal, obj)
        else:
            b, g = belief, option_goal(state, belief, episode.goal, option)
        p = action_probability(state, b, g, action, episode.params)
        out.append(math.log(p) if p > 0 else -math.inf)
    return tuple(out)


def rewards(questions, choices, floor: float = QA_FLOOR) -> np.ndarray:
    """[B] SSRL rewards of answers `choices` (0, 1, or -1 unparseable) to `questions`."""
    ll = np.array([q.log_lik[max(int(c), 0)] for q, c in zip(questions, choices)])
    return qa_reward(ll, np.asarray(choices), floor=floor)


# --- generation ------------------------------------------------------------------------------
def _shuffled(rng, truth: str, other: str) -> tuple[tuple[str, str], int]:
    answer = int(rng.integers(0, 2))
    return ((truth, other) if answer == 0 else (other, truth)), answer


def _candidates(episode) -> dict[str, list[dict]]:
    """Every (step, facts) where each type can be posed."""
    out: dict[str, list[dict]] = {k: [] for k in QUESTION_TYPES}
    goal, apt = episode.goal, episode.apartment
    acts, states, beliefs = episode.actions, episode.states, episode.beliefs
    opened: dict[int, tuple[int, tuple[str, ...]]] = {}  # container -> (step, searched types)
    for t in range(1, episode.length):
        s_prev, b_prev, a = states[t - 1], beliefs[t - 1], acts[t - 1]
        s, b = states[t], beliefs[t]
        look = searching(s_prev, b_prev, goal)
        if acts[t - 1].verb == "open":
            c = acts[t - 1].furniture
            missing = tuple(k for k in look if not _g_in(s, k, c))
            opened[c] = (t - 1, missing)
        fid = a.furniture if a.verb == "walk" else -1
        about_to_open = (fid >= 0 and apt.piece(fid).is_container and s.agents[0].close_to == fid
                         and fid not in b.seen and acts[t] == open_(fid))
        if about_to_open:
            known = _known_types(s_prev, b_prev)
            for kind in look:
                truth = _g_in(s, kind, fid)
                out["1.1" if truth else "1.2"].append(dict(step=t, obj=kind, container=fid))
                if kind in known:
                    continue
                observed = sorted(k for k in known & set(catalog.GOAL_OBJECT_TYPES)
                                  if k not in needs(s_prev, b_prev, goal)
                                  and known_available(s_prev, b_prev, goal, k) > 0)
                if observed:
                    out["2.1" if truth else "2.2"].append(dict(step=t, truth=kind,
                                                               others=observed))
        searching_walk = (a.verb == "walk" and (
            (a.room and a.room not in b_prev.visited)
            or (fid >= 0 and apt.piece(fid).is_container and fid not in b_prev.seen)))
        if searching_walk:
            for c, (s0, kinds) in opened.items():
                if t - 1 - s0 < LONG_TERM_GAP or fid == c or s_prev.agents[0].close_to == c:
                    continue
                for kind in kinds:
                    if (kind in look and c in b.seen and not _g_in(s, kind, c)
                            and not thinks_possible(s, b, kind, c)):
                        out["1.3"].append(dict(step=t, obj=kind, container=c))
        if a.verb == "grab":
            kind, at = s_prev.object_types[a.obj], b_prev.location.get(a.obj)
            wanted = needs(s_prev, b_prev, goal)
            if at is not None and at != HELD and kind in wanted:
                others = sorted({s_prev.object_types[o] for o in b_prev.believed_at(at)}
                                & set(catalog.GOAL_OBJECT_TYPES) - set(wanted) - {kind})
                if others:
                    out["2.4"].append(dict(step=t, truth=kind, others=others))
        if fid >= 0:
            nxt = next((u for u in range(t - 1, episode.length) if acts[u].is_key), None)
            if nxt is not None and acts[nxt].verb == "grab":
                o = acts[nxt].obj
                kind = s.object_types[o]
                if (b_prev.location.get(o) == fid and o not in beliefs[0].location
                        and kind in needs(s_prev, b_prev, goal)):
                    known = _known_types(s_prev, b_prev)
                    present = set(s.object_types)
                    unobserved = sorted(k for k in catalog.GOAL_OBJECT_TYPES
                                        if k in present and k not in known
                                        and k not in needs(s_prev, b_prev, goal))
                    if unobserved:
                        out["2.3"].append(dict(step=t, truth=kind, others=unobserved))
    return out


def make_questions(episodes, seed: int = 0, per_type: int = 1) -> list[Question]:
    """Up to `per_type` questions of each type per episode (distinct random candidates),
    options in random order; deterministic in `seed`."""
    out = []
    for e, episode in enumerate(episodes):
        rng = np.random.default_rng([seed, e])
        cands = _candidates(episode)
        for qtype in QUESTION_TYPES:
            pool = cands[qtype]
            if not pool:
                continue
            for i in rng.permutation(len(pool))[:per_type]:
                c = pool[int(i)]
                if qtype.startswith("1."):
                    truth = "not inside" if qtype == "1.3" else "inside"
                    other = "inside" if truth == "not inside" else "not inside"
                    options, answer = _shuffled(rng, truth, other)
                    extra = dict(obj=c["obj"], container=c["container"])
                else:
                    other = c["others"][int(rng.integers(len(c["others"])))]
                    options, answer = _shuffled(rng, c["truth"], other)
                    extra = {}
                ll = option_log_likelihoods(episode, c["step"], qtype, options, **extra)
                out.append(Question(e, c["step"], qtype, options, answer, log_lik=ll, **extra))
    return out


# --- answerers -----------------------------------------------------------------------------
def planner_answer(episode, q: Question) -> int:
    """The planner's own state at the question's step answers (module docstring)."""
    s, b = episode.states[q.step], episode.beliefs[q.step]
    if q.is_belief:
        inside = thinks_possible(s, b, q.obj, q.container)
        return q.options.index("inside" if inside else "not inside")
    wanted = needs(s, b, episode.goal)
    hits = [i for i, k in enumerate(q.options) if k in wanted]
    return hits[0] if len(hits) == 1 else -1


def reward_choices(questions, seed: int = 0) -> np.ndarray:
    """The answer SSRL's reward favours: the option with the larger floored likelihood (ties:
    a coin flip)."""
    rng = np.random.default_rng(seed)
    floor = math.log(QA_FLOOR)
    ll = np.maximum(np.array([q.log_lik for q in questions]), floor)
    flips = rng.integers(0, 2, len(questions))
    return np.where(ll[:, 0] == ll[:, 1], flips, np.argmax(ll, axis=1))


def random_choices(questions, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, 1]).integers(0, 2, len(questions))


# --- text ------------------------------------------------------------------------------------
def _noun(kind: str) -> str:
    return text.natural(kind)


def question_sentence(episode, q: Question, name: str = NAME) -> str:
    s = episode.states[q.step]
    if q.is_belief:
        g, c = _noun(q.obj), text.furniture_name(s, q.container)
        state = {"inside": f"{name} thinks that there is {text._article(g)} inside the {c}.",
                 "not inside": f"{name} thinks that there isn't any {g} inside the {c}."}
        head = (f"If {name} has been trying to get {text._article(g)}, which one of the "
                "following statements is more likely to be true?")
        opts = [state[o] for o in q.options]
    else:
        head = "Which one of the following statements is more likely to be true?"
        opts = [f"{name} has been trying to get {text._article(_noun(k))}." for k in q.options]
    return (f"Question: {head} (a) {opts[0]} (b) {opts[1]} "
            "Please respond with either a or b.")


def figure_question(episode, q: Question, name: str = NAME, instruction: bool = True) -> str:
    """Figure 8: the start state, the actions so far, the question (and the instruction)."""
    parts = [text.mmtom_apartment_text(episode.states[0]),
             text.mmtom_actions_text(episode.states[:q.step], episode.actions[:q.step], name),
             question_sentence(episode, q, name)]
    if instruction:
        parts.append(INSTRUCTION)
    return "\n\n".join(parts)


def _seen_where(episode, q: Question, kind: str) -> str:
    """'held' (the last action grabbed one), 'here' (on/in the furniture the last action walked
    to or grabbed from), 'elsewhere' or 'unseen', from the human's observations up to the
    question."""
    b, s = episode.beliefs[q.step - 1], episode.states[q.step - 1]
    a = episode.actions[q.step - 1]
    if a.verb == "grab" and s.object_types[a.obj] == kind:
        return "held"  # the last action picked one up: in the person's hand now
    spots = {loc for o, loc in b.known if s.object_types[o] == kind and loc != HELD}
    if not spots:
        return "unseen"
    at = {"walk": a.furniture, "grab": b.location.get(a.obj)}.get(a.verb)
    return "here" if at is not None and at in spots else "elsewhere"


def compact_question(episode, q: Question) -> str:
    """One line: `belief | salmon | fridge | a in | b not | last to-it | unopened` or
    `goal | a plate | b apple | last walk kitchencabinet | a unseen | b elsewhere`."""
    s = episode.states[q.step - 1]
    a = episode.actions[q.step - 1]
    where = (a.room or s.apartment.piece(a.furniture).type) if a.verb == "walk" else (
        s.object_types[a.obj] if a.verb == "grab" else
        s.apartment.piece(a.furniture).type if a.furniture >= 0 else "-")
    if q.is_belief:
        short = {"inside": "in", "not inside": "not"}
        to_it = "to-it" if a.verb == "walk" and a.furniture == q.container else "elsewhere"
        before = any(x == open_(q.container) for x in episode.actions[:q.step])
        parts = ["belief", q.obj, s.apartment.piece(q.container).type,
                 f"a {short[q.options[0]]}", f"b {short[q.options[1]]}", f"last {to_it}",
                 "opened" if before else "unopened"]
    else:
        parts = ["goal", f"a {q.options[0]}", f"b {q.options[1]}", f"last {a.verb} {where}",
                 f"a {_seen_where(episode, q, q.options[0])}",
                 f"b {_seen_where(episode, q, q.options[1])}"]
    return " | ".join(parts)


RENDERERS = {"figure": figure_question, "compact": compact_question}


def render_question(observation: str, episode, q: Question) -> str:
    if observation not in RENDERERS:
        raise ValueError(f"unknown QA observation {observation!r}; expected one of "
                         f"{sorted(RENDERERS)}")
    return RENDERERS[observation](episode, q)


# --- evaluation ------------------------------------------------------------------------------
def accuracy_table(choices, questions) -> dict:
    """Table 4b's accuracy per type and overall (episode-clustered SE)."""
    return accuracy_by_type(choices, [q.answer for q in questions], [q.qtype for q in questions],
                            [q.episode for q in questions], QUESTION_TYPES)


def baseline_tables(episodes, questions, seed: int = 0) -> dict[str, dict]:
    """The model-free rows: the planner's own state, the reward's choice, a random answerer."""
    planner = [planner_answer(episodes[q.episode], q) for q in questions]
    return {"planner's own belief": accuracy_table(planner, questions),
            "reward's choice (likelihood argmax)": accuracy_table(reward_choices(questions, seed),
                                                                  questions),
            "random answerer": accuracy_table(random_choices(questions, seed), questions)}


def markdown(tables: dict[str, dict], title: str = "") -> str:
    cols = list(QUESTION_TYPES) + ["overall"]
    lines = [title or "Household QA accuracy (Table 4b protocol; binary choice, chance 0.5; "
             "mean ± SE, episode-clustered)", "",
             "| method | " + " | ".join(f"{c} {TYPE_NAMES.get(c, '')}".strip() for c in cols)
             + " | parsed | TFLOPs/question |", "|---|" + "---|" * (len(cols) + 2)]
    for name, table in tables.items():
        cells = [f"{table[c][0]:.3f} ± {table[c][1]:.3f} (n={table[c][2]})" if c in table
                 else "–" for c in cols]
        tf = table.get("tflops_per_question")
        cells += [f"{table['valid']:.2f}" if "valid" in table else "–",
                  f"{tf:.2e}" if tf is not None else "N/A"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["INSTRUCTION", "QUESTION_TYPES", "Question", "RENDERERS", "TYPE_NAMES",
           "accuracy_table", "baseline_tables", "belief_with", "compact_question",
           "figure_question", "known_available", "make_questions", "markdown",
           "option_goal", "option_log_likelihoods", "planner_answer", "question_sentence",
           "random_choices", "render_question", "reward_choices", "rewards", "searching",
           "thinks_possible"]
