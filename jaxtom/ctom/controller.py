"""The batched CToM controller (section 4.1): plan -> decision; ASK; DRAFT's hidden loop
draft -> anticipated reply -> satisfaction check -> revise (<= K_max); COMMIT.

`mode="direct"` is the Prompting Base / Naive GRPO loop of appendix C.2 instead: prompts 5-7,
one visible response per round (no plan, decision, prediction or revision), capped by table
4's baseline output limit; math ends when a response's boxed answer passes the evaluator,
coding and writing when a response starts with `I WANT TO ANSWER:`.

Each conversation is a coroutine that yields what it needs next (a policy phase or a
simulator reply) and receives the answer. The driver gathers the pending requests of every
live conversation, sends policy phases with the same (cap, stop string) to the policy as one
batch and all simulator requests as another, so conversations in different phases advance
together and a finished one simply stops yielding (it leaves the batch).

Contexts are token sequences that extend each other: a phase appends controller tags to the
tokens just sampled, and a round's h_t is the previous h_t plus the new visible turns' tokens
(`protocol.extend_history`). The driver names each row's conversation, so a policy that keeps
each conversation's KV cache (`policies.SamplerPolicy`) prefills only the new tokens, and
with `shared_buffer` every phase asks for the same output buffer (its largest cap), so
phases with different caps share one compiled decode loop.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Protocol, Sequence

import jax

from jaxtom.ctom import packing
from jaxtom.ctom import protocol as P
from jaxtom.ctom.data import Task
from jaxtom.ctom.effort import DomainSettings, combined_reward, domain_settings, effort_cost
from jaxtom.ctom.prompts import ANSWER_MARKER, system_prompt
from jaxtom.ctom.sandbox import score_coding
from jaxtom.ctom.satisfaction import END_SIGNAL, is_satisfied
from jaxtom.ctom.scoring import rouge_l_f1, score_math
from jaxtom.ctom.simulators import SimReply, SimRequest, UserSimulator

MODES = ("ctom", "direct")


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    domain: str
    max_rounds: int  # N
    max_revisions: int = 3  # K_max
    plan_cap: int = 128
    decision_cap: int = 1
    ask_cap: int = 256
    draft_cap: int = 2048
    prediction_cap: int = 384
    revision_cap: int = 2048
    w_effort: float = 0.01
    categorical: bool = True
    mode: str = "ctom"  # ctom | direct (Prompting Base / Naive GRPO)
    response_cap: int = 2048  # direct mode: the one response per round
    # every phase asks the sampler for one output buffer (the largest cap), so phases share a
    # compiled decode loop; each decode step then attends over that many more cache slots
    shared_buffer: bool = True

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"controller mode must be one of {MODES}, got {self.mode!r}")

    @classmethod
    def for_domain(cls, domain: str, **overrides) -> "ControllerConfig":
        """Table 4's settings for `domain`, then `overrides`.

        Unless given, `response_cap` is the CToM round's whole generation budget, draft +
        (K+1) predictions + K revisions (section 5.1.2; it reproduces table 4's baseline
        limits), so shrinking the CToM caps for a CPU run shrinks the baseline's too.
        """
        d: DomainSettings = domain_settings(domain)
        base = dict(domain=domain, max_rounds=d.max_rounds, max_revisions=d.max_revisions,
                    draft_cap=d.draft_cap, prediction_cap=d.prediction_cap,
                    revision_cap=d.revision_cap)
        merged = {**base, **overrides}
        merged.setdefault("response_cap", merged["draft_cap"] + merged["max_revisions"] * (
            merged["prediction_cap"] + merged["revision_cap"]) + merged["prediction_cap"])
        return cls(**merged)

    @property
    def largest_cap(self) -> int:
        if self.mode == "direct":
            return self.response_cap
        return max(self.plan_cap, self.decision_cap, self.ask_cap, self.draft_cap,
                   self.prediction_cap, self.revision_cap)


class Policy(Protocol):
    def generate(self, contexts: Sequence[Sequence[int]], *, max_new_tokens: int,
                 stop: Sequence[str], kind: str, key: jax.Array,
                 conversations: Sequence[int] | None = None,
                 buffer_len: int | None = None) -> list[list[int]]: ...


@dataclasses.dataclass
class Round:
    index: int
    plan: str
    raw_decision: str | None  # what the policy chose (None: malformed)
    action: str  # what ran: ASK | DRAFT | COMMIT (invalid COMMIT / malformed -> DRAFT)
    drafts: list[str] = dataclasses.field(default_factory=list)
    predictions: list[str] = dataclasses.field(default_factory=list)
    prediction_prefix: list[int] = dataclasses.field(default_factory=list)  # context lengths
    shown: str | None = None
    reply: str | None = None
    history_len: int = 0  # visible messages before this round (h_t)


@dataclasses.dataclass
class Conversation:
    task: Task
    visible: list[tuple[str, str]]
    rounds: list[Round] = dataclasses.field(default_factory=list)
    sequences: list[P.Segments] = dataclasses.field(default_factory=list)  # one per round
    submission: str | None = None
    end: str = "running"  # solved | commit | budget | failed
    failed: str | None = None
    score: float = 0.0
    effort: float = 0.0
    reward: float = 0.0

    @property
    def actions(self) -> list[str]:
        return [r.action for r in self.rounds]


@dataclasses.dataclass
class _Gen:
    tokens: list[int]
    max_new_tokens: int
    stop: tuple[str, ...]
    kind: str


def _solves(task: Task, message: str) -> bool:
    """Math ends as soon as a shown message carries the correct boxed answer; packing as soon
    as a shown list is fully right (the user has nothing to add, as the paper's math user
    is not asked again once satisfied), so only lists that miss something cost a reply."""
    if task.domain == "packing":
        return packing.score(message, task) == 1.0
    return task.domain == "math" and bool(score_math(message, task.reference))


def _continue(conv: Conversation, rnd: Round, solved: bool, last_round: bool):
    """After a visible message: end on a solved task, else fetch the user's reply unless the
    rounds are spent. Returns True to play another round; False when the conversation stops
    (`conv.end` says why, still "running" when only the budget ran out)."""
    if solved:
        conv.end, conv.submission = "solved", rnd.shown  # the solving message is the answer
        return False
    if last_round:
        return False
    reply = yield SimRequest(conv.task, tuple(conv.visible))
    if reply.error:
        conv.failed, conv.end = reply.error, "failed"
        return False
    rnd.reply = reply.text
    conv.visible.append(("user", reply.text))
    return True


def _conversation(task: Task, cfg: ControllerConfig, tok, glue: P.ChatGlue, system: str):
    enc, dec = tok.encode, tok.decode
    conv = Conversation(task=task, visible=[("user", task.prompt)])
    shown = None
    history, seen = None, None  # h_t's tokens, and the visible turns they render

    def phase(seg, cap, closing, kind):
        ids = yield _Gen(list(seg.tokens), cap, (closing,) if closing else (), kind)
        seg.sampled(ids, is_decision=kind == "decision")
        text = dec(ids)
        if closing and closing not in text:
            seg.controller(enc(closing))  # the policy stopped early: close the phase for it
        return text

    for t in range(cfg.max_rounds):
        history = P.extend_history(tok, system, seen, conv.visible, history)
        seen = list(conv.visible)
        seg = P.Segments()
        seg.controller(history + enc(P.PLAN_START))
        plan = P.strip_phase((yield from phase(seg, cfg.plan_cap, P.PLAN_END, "plan")), P.PLAN_END)
        seg.controller(enc("\n" + P.DECISION + " "))
        raw = P.parse_decision((yield from phase(seg, cfg.decision_cap, None, "decision")))
        action = raw or "DRAFT"
        if action == "COMMIT" and shown is None:
            action = "DRAFT"  # COMMIT is unavailable before a draft was shown
        rnd = Round(t, plan, raw, action, history_len=len(conv.visible))
        conv.rounds.append(rnd)
        conv.sequences.append(seg)
        if action == "COMMIT":
            # the submission is the last SHOWN draft (section 4.1); the user has replied to it
            # since, so the final request re-sends it as the last assistant message (the
            # simulator prompt adds the marker) without adding a visible message
            conv.submission, conv.end = shown, "commit"
            reply = yield SimRequest(task, tuple(conv.visible) + (("assistant", shown),),
                                     final=True)
            rnd.reply = reply.text or None
            if reply.error:
                conv.failed, conv.end = reply.error, "failed"
            return conv
        if action == "ASK":
            seg.controller(enc("\n" + P.ASK_START))
            message = P.strip_phase((yield from phase(seg, cfg.ask_cap, P.ASK_END, "ask")),
                                    P.ASK_END)
        else:
            seg.controller(enc("\n" + P.DRAFT_START))
            for k in range(cfg.max_revisions + 1):
                cap = cfg.draft_cap if k == 0 else cfg.revision_cap
                draft = P.strip_phase((yield from phase(seg, cap, P.DRAFT_END, "draft")),
                                      P.DRAFT_END)
                seg.controller(enc(glue.assistant_to_user + P.ANTICIPATED + "\n"))
                rnd.prediction_prefix.append(len(seg))
                pred = P.strip_phase((yield from phase(seg, cfg.prediction_cap,
                                                       P.PREDICTION_END, "prediction")),
                                     P.PREDICTION_END)
                rnd.drafts.append(draft)
                rnd.predictions.append(pred)
                if is_satisfied(pred) or k == cfg.max_revisions:
                    break
                seg.controller(enc(glue.user_to_assistant + P.DRAFT_START))
            message = shown = draft
        rnd.shown = message
        conv.visible.append(("assistant", message))
        solved = action == "DRAFT" and _solves(task, message)
        if not (yield from _continue(conv, rnd, solved, t == cfg.max_rounds - 1)):
            break
    if conv.end == "running":
        conv.end, conv.submission = "budget", shown
    return conv


def _direct_conversation(task: Task, cfg: ControllerConfig, tok, system: str):
    """Prompting Base / Naive GRPO: the policy writes each visible message in one phase.

    The whole response (through its end-of-turn token) is policy text; the rendered history
    is controller text. A coding/writing response that starts with the answer marker is the
    submission: it is shown without the marker and the simulator gets it as a final request
    (which re-adds the marker, as after CToM's COMMIT).
    """
    conv = Conversation(task=task, visible=[("user", task.prompt)])
    last = None
    history, seen = None, None
    for t in range(cfg.max_rounds):
        history = P.extend_history(tok, system, seen, conv.visible, history)
        seen = list(conv.visible)
        seg = P.Segments()
        seg.controller(history)
        ids = yield _Gen(list(seg.tokens), cfg.response_cap, (), "response")
        seg.sampled(ids)
        text = tok.decode(list(ids), skip_special_tokens=True).strip()
        submits = task.domain != "math" and text.startswith(ANSWER_MARKER)
        message = text[len(ANSWER_MARKER):].strip() if submits else text
        rnd = Round(t, "", None, "COMMIT" if submits else "RESPOND", shown=message,
                    history_len=len(conv.visible))
        conv.rounds.append(rnd)
        conv.sequences.append(seg)
        conv.visible.append(("assistant", message))
        last = message
        if submits:
            conv.submission, conv.end = message, "commit"
            reply = yield SimRequest(task, tuple(conv.visible), final=True)
            rnd.reply = reply.text or None
            if reply.error:
                conv.failed, conv.end = reply.error, "failed"
            return conv
        if not (yield from _continue(conv, rnd, _solves(task, message),
                                     t == cfg.max_rounds - 1)):
            break
    if conv.end == "running":
        conv.end, conv.submission = "budget", last
    return conv


def score_conversation(conv: Conversation, cfg: ControllerConfig, tok,
                       code_scorer: Callable[[str | None, str], float] | None = None) -> None:
    """Fills score, effort and reward (eqs. 3-4); discarded drafts are never scored."""
    task = conv.task
    if task.domain == "math":
        conv.score = float(any(score_math(text, task.reference)
                               for role, text in conv.visible if role == "assistant"))
    elif task.domain == "coding":
        code_scorer = code_scorer or score_coding
        conv.score = code_scorer(conv.submission, task.tests or "") if conv.submission else 0.0
    elif task.domain == "packing":
        conv.score = packing.score(conv.submission, task)
    else:
        conv.score = rouge_l_f1(conv.submission, task.reference) if conv.submission else 0.0
    d = domain_settings(task.domain)
    users = [text for role, text in conv.visible if role == "user" and text != END_SIGNAL]
    assistant = [text for role, text in conv.visible if role == "assistant"]
    conv.effort = effort_cost(len(users), sum(len(tok.encode(u)) for u in users),
                              sum(len(tok.encode(a)) for a in assistant), N=d.max_rounds,
                              B_u=d.user_budget, B_a=d.assistant_budget)
    conv.reward = combined_reward(conv.score, conv.effort, w_effort=cfg.w_effort)


def run_conversations(tasks: Sequence[Task], policy: Policy, simulator: UserSimulator, tok,
                      cfg: ControllerConfig, *, key: jax.Array, seed: int = 0,
                      code_scorer=None, host_map=None) -> list[Conversation]:
    """Runs one conversation per task (repeat a task G times for a GRPO group), batched;
    `cfg.mode` picks the CToM loop or the direct (baseline) one. Conversation i is row id i
    for the policy; a policy's kept caches are released before and after the run.

    `host_map(fn, items)` computes `fn(items)` (a list to a list) for work whose result may
    vary from run to run, the coding sandbox's time limits: on several processes
    `lockstep.shared_map`, so that it runs once and every process gets the same scores."""
    if cfg.mode == "direct":
        system = system_prompt(cfg.domain, baseline=True)
        gens = [_direct_conversation(t, cfg, tok, system) for t in tasks]
    else:
        glue = P.ChatGlue.from_tokenizer(tok)
        system = system_prompt(cfg.domain, categorical=cfg.categorical)
        gens = [_conversation(t, cfg, tok, glue, system) for t in tasks]
    results: list[Conversation | None] = [None] * len(tasks)
    pending: dict[int, object] = {}

    def advance(i, value):
        try:
            pending[i] = gens[i].send(value)
        except StopIteration as stop:
            results[i] = stop.value
            pending.pop(i, None)

    release = getattr(policy, "release_caches", lambda: None)
    release()
    try:
        _drive(gens, pending, advance, policy, simulator, cfg, key, seed)
    finally:
        release()
    if host_map is not None:
        code_scorer = _mapped_code_scorer(results, code_scorer, host_map)
    for conv in results:
        if conv.failed is None:
            score_conversation(conv, cfg, tok, code_scorer)
    return results


def _mapped_code_scorer(convs: Sequence[Conversation], code_scorer, host_map):
    """A code scorer reading scores computed up front by `host_map` (None: no coding)."""
    pairs = sorted({(c.submission, c.task.tests or "") for c in convs
                    if c.failed is None and c.task.domain == "coding" and c.submission})
    if not pairs:
        return code_scorer
    base = code_scorer or score_coding
    table = dict(zip(pairs, host_map(lambda share: [base(c, t) for c, t in share], pairs)))
    return lambda code, tests: table[(code, tests)]


def _drive(gens, pending, advance, policy, simulator, cfg: ControllerConfig, key, seed):
    """Advances every conversation until none is pending: simulator requests first (one
    batch), else the largest group of policy phases with the same (cap, stop, kind)."""
    buffer_len = cfg.largest_cap if cfg.shared_buffer else None
    for i in range(len(gens)):
        advance(i, None)
    calls = 0
    while pending:
        sims = [(i, r) for i, r in pending.items() if isinstance(r, SimRequest)]
        if sims:
            replies = simulator.reply([r for _, r in sims], seed=seed + calls)
            calls += 1
            for (i, _), rep in zip(sims, replies):
                advance(i, rep if isinstance(rep, SimReply) else SimReply(str(rep)))
            continue
        groups: dict[tuple, list[int]] = {}
        for i, r in pending.items():
            groups.setdefault((r.max_new_tokens, r.stop, r.kind), []).append(i)
        (cap, stop, kind), rows = max(groups.items(), key=lambda kv: len(kv[1]))
        outs = policy.generate([pending[i].tokens for i in rows], max_new_tokens=cap,
                               stop=list(stop), kind=kind, key=jax.random.fold_in(key, calls),
                               conversations=rows, buffer_len=buffer_len)
        calls += 1
        for i, ids in zip(rows, outs):
            advance(i, list(ids))
