"""`jaxtom eval CONFIG`: run evaluation conversations and print the paper's table 1/2
columns (score x100 with task-clustered SEM, visible turns and tokens; user replies and reply
tokens over conversations with a reply, C_effort of eq. 3; ASK/DRAFT/COMMIT shares; lexical
prediction F1 beside the F1 of a know-nothing prediction on packing), the held-out
reply-prediction NLL and the self-revision gain (eq. 8).

A run trained from scratch (`model.path` "", the packing default) is evaluated twice: the
trained model and its format warm-up (Prompting Base in direct mode), on held-out tasks. The
per-conversation records and per-pair NLLs go to `eval_<mode>.json` in the run's directory,
so that runs of several seeds pool (`benchmarks/ctom_tiny.py`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import jax

from jaxtom import storage
from jaxtom.ctom import lockstep, packing
from jaxtom.ctom.controller import ControllerConfig, Conversation, run_conversations
from jaxtom.ctom.heldout import heldout_pairs, pair_nll
from jaxtom.ctom.metrics import (
    action_shares,
    clustered_mean_sem,
    conversation_f1,
    math_conversation_f1,
    self_revision_gain,
    user_effort,
)
from jaxtom.ctom.satisfaction import END_SIGNAL
from jaxtom.ctom.scoring import rouge_l_f1, score_math
from jaxtom.ctom.task_sets import evaluation_tasks
from jaxtom.ctom.train import (
    conversation_trainer,
    load_ctom_config,
    make_simulator,
    policy_and_tokenizer,
    sampler_policy,
)
from jaxtom.rl.checkpoint import Checkpointer


def summarize(convs: list[Conversation], tok, disclosure: str = "mismatch") -> dict[str, float]:
    """Table 1/2 numbers for finished conversations (failed ones are counted, not scored)."""
    ok = [c for c in convs if c.failed is None]
    by_task = lambda f: {tid: [f(c) for c in ok if c.task.id == tid]  # noqa: E731
                         for tid in dict.fromkeys(c.task.id for c in ok)}
    out = {"conversations": float(len(ok)), "failed": float(len(convs) - len(ok))}
    if not ok:
        return out
    for name, f in (("Score", lambda c: 100 * c.score),
                    ("Turns", lambda c: sum(r == "assistant" for r, _ in c.visible)),
                    ("Tokens", lambda c: sum(len(tok.encode(t)) for r, t in c.visible
                                             if r == "assistant"))):
        out[name], out[name + "_sem"] = clustered_mean_sem(by_task(f))
    replies = [(c.task.id, [len(tok.encode(t)) for r, t in c.visible[1:]
                            if r == "user" and t != END_SIGNAL]) for c in ok]
    eff = user_effort(replies)
    out.update(Replies=eff["replies"], Replies_sem=eff["replies_sem"],
               ReplyTokens=eff["tokens"], ReplyTokens_sem=eff["tokens_sem"])
    out["Effort"], out["Effort_sem"] = clustered_mean_sem(by_task(lambda c: 100 * c.effort))
    out.update(action_shares(a for c in ok for a in c.actions))
    for name, f1_of in (("LexF1", prediction_f1),
                        ("LexF1Floor", lambda c: floor_f1(c, disclosure))):
        f1 = {}
        for c in ok:
            score = f1_of(c)
            if score is not None:
                f1.setdefault(c.task.id, []).append(100 * score)
        out[name], out[name + "_sem"] = clustered_mean_sem(f1) if f1 else (float("nan"),) * 2
    gains = [pair for c in ok for pair in revision_pairs(c)]
    out["RevGain"], out["RevGain_sem"] = self_revision_gain(gains)
    out["revised_rounds"] = float(len(gains))
    return out


def round_predictions(conv: Conversation) -> list[str | None]:
    """Each visible round's prediction slot (its last prediction; None: no slot)."""
    return [r.predictions[-1] if r.action == "DRAFT" and r.predictions else None
            for r in conv.rounds]


def prediction_f1(conv: Conversation) -> float | None:
    """The conversation's lexical prediction F1 with appendix B.5's pairing (None: no pair)."""
    if conv.task.domain == "math":
        users = [t for r, t in conv.visible if r == "user"]
        return math_conversation_f1([p for p in round_predictions(conv) if p is not None],
                                    users)
    return conversation_f1(round_predictions(conv), [r.reply for r in conv.rounds])


def floor_f1(conv: Conversation, disclosure: str = "mismatch") -> float | None:
    """Lexical F1 of a know-nothing prediction (`packing.know_nothing_prediction`) on the
    same pairs as `prediction_f1`; None off the packing domain."""
    if conv.task.domain != "packing":
        return None
    guess = packing.know_nothing_prediction(conv.task, disclosure)
    preds = [None if p is None else guess for p in round_predictions(conv)]
    return conversation_f1(preds, [r.reply for r in conv.rounds])


def draft_score(text: str, task) -> float | None:
    """A hidden draft's task score where scoring it is cheap (None: coding, which would run
    the sandbox for every draft)."""
    if task.domain == "packing":
        return packing.score(text, task)
    if task.domain == "math":
        return float(bool(score_math(text, task.reference)))
    if task.domain == "writing":
        return rouge_l_f1(text, task.reference)
    return None


def revision_pairs(conv: Conversation) -> list[tuple[float, float]]:
    """(s(d(0)), s(d(K))) of each revised round (eq. 8): first and shown draft."""
    out = []
    for r in conv.rounds:
        if r.action == "DRAFT" and len(r.drafts) > 1:
            first, last = draft_score(r.drafts[0], conv.task), draft_score(r.drafts[-1],
                                                                             conv.task)
            if first is not None:
                out.append((first, last))
    return out


def conversation_record(conv: Conversation, tok, disclosure: str = "mismatch") -> dict:
    """What pooling over seeds needs of one conversation (jsonable)."""
    ok = conv.failed is None
    return {"task": conv.task.id, "failed": not ok, "score": conv.score,
            "effort": conv.effort,
            "turns": sum(r == "assistant" for r, _ in conv.visible),
            "tokens": sum(len(tok.encode(t)) for r, t in conv.visible if r == "assistant"),
            "replies": [len(tok.encode(t)) for r, t in conv.visible[1:]
                        if r == "user" and t != END_SIGNAL],
            "lex_f1": prediction_f1(conv) if ok else None,
            "lex_f1_floor": floor_f1(conv, disclosure) if ok else None,
            "revisions": revision_pairs(conv), "actions": conv.actions}


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """One line per method: mean ± task-clustered SEM for each column."""
    def pm(s, k):
        return f"{s.get(k, float('nan')):.2f} ± {s.get(k + '_sem', float('nan')):.2f}"
    cols = ["Score", "Turns", "Tokens", "Replies", "ReplyTokens", "Effort", "PredNLL",
            "LexF1", "LexF1Floor", "RevGain"]
    lines = ["Method | " + " | ".join(cols) + " | ASK | DRAFT | COMMIT | conversations"]
    for name, s in rows.items():
        lines.append(f"{name} | " + " | ".join(pm(s, c) for c in cols) + " | " + " | ".join(
            f"{s.get(a, 0.0):.1f}" for a in ("ASK", "DRAFT", "COMMIT"))
            + f" | {int(s.get('conversations', 0))} ({int(s.get('failed', 0))} failed)")
    return "\n".join(lines)


def method_name(config, cfg: ControllerConfig, trained: bool) -> str:
    """The paper's name for what is evaluated (section 5.1.2 and the ablations)."""
    if cfg.mode == "direct":  # appendix C.2 baselines: untrained vs GRPO-trained
        if not trained:
            return "Prompting Base"
        return "Naive GRPO + reply NLL" if config.ctom.reply_nll else "Naive GRPO"
    if not trained:
        return "CToM untrained"
    no_pred, no_effort = config.step.lambda_pred == 0, cfg.w_effort == 0
    return ("CToM task-only" if no_pred and no_effort else "CToM w/o prediction" if no_pred
            else "CToM w/o effort" if no_effort else "CToM")


def evaluate_model(model, tok, config, tasks, cfg: ControllerConfig, pairs) -> tuple[dict, dict]:
    """(table summary, jsonable records) of `model`'s conversations on `tasks` and its NLL on
    the held-out reply pairs."""
    s = config.ctom
    policy = sampler_policy(model, tok, s, temperature=config.trainer.temperature)
    # on several processes every process runs every conversation (jaxtom.ctom.lockstep)
    convs = run_conversations([t for t in tasks for _ in range(s.eval_conversations)], policy,
                              lockstep.shared_simulator(make_simulator(s)), tok, cfg,
                              key=jax.random.key(config.trainer.seed + 1),
                              host_map=lockstep.shared_map)
    summary = summarize(convs, tok, s.disclosure)
    nll = pair_nll(model, pairs, s.pred_row_len) if len(pairs) else []
    if len(nll):
        by_task: dict[str, list[float]] = {}
        for tid, v in zip(pairs.tasks, nll):
            by_task.setdefault(tid, []).append(float(v))
        summary["PredNLL"], summary["PredNLL_sem"] = clustered_mean_sem(by_task)
    records = {"conversations": [conversation_record(c, tok, s.disclosure) for c in convs],
               "pair_nll": [float(v) for v in nll]}
    return summary, records


def models_to_evaluate(config, tok, start_model, tasks):
    """[(trained?, source, model)]: the run's latest checkpoint (when there is one), and the
    model it started from when that is a warm-up of this run (from-scratch models)."""
    out = []
    ckpt_dir = storage.path(config.trainer.workdir) / "checkpoints"
    if ckpt_dir.exists():
        trainer = conversation_trainer(start_model, tok, tasks, config.step, config.trainer,
                                       config.ctom)
        ckpt = Checkpointer(ckpt_dir, keep=config.trainer.keep_checkpoints)
        step = ckpt.latest_step()
        if step is not None:
            state, _ = ckpt.restore(trainer.learner.init_state(start_model,
                                                               seed=config.trainer.seed))
            out.append((True, f"checkpoint {step}", trainer.learner.model(state)))
        ckpt.close()
    if not out or not config.model.path:
        out.append((False, "warm-up" if not config.model.path else "untrained", start_model))
    return out


def run_eval(config_path: str, overrides=()) -> dict[str, dict[str, float]]:
    """Evaluates a CToM run; prints the table and returns {method: summary}."""
    config, s = load_ctom_config(config_path, overrides)
    start_model, tok = policy_and_tokenizer(config)
    tasks = evaluation_tasks(s, config.trainer.seed)
    cfg = s.controller_config()
    # the held-out replies every model of this seed is scored on: the starting model's own
    # CToM conversations (its predictions' contexts and the user's replies to its drafts)
    ctom_cfg = dataclasses.replace(cfg, mode="ctom")
    pairs = heldout_pairs(sampler_policy(start_model, tok, s,
                                         temperature=config.trainer.temperature),
                          make_simulator(s), tok, tasks, ctom_cfg, conversations=1,
                          row_len=s.pred_row_len, seed=config.trainer.seed + 777)
    rows, dump = {}, {"config": config_path, "overrides": list(overrides),
                      "seed": config.trainer.seed, "mode": cfg.mode,
                      "pair_tasks": pairs.tasks,
                      "pair_fingerprint": _fingerprint(pairs), "methods": {}}
    for trained, source, model in models_to_evaluate(config, tok, start_model, tasks):
        name = method_name(config, cfg, trained)
        rows[name], records = evaluate_model(model, tok, config, tasks, cfg, pairs)
        dump["methods"][name] = {"source": source, "summary": rows[name], **records}
    if jax.process_index() == 0:
        print(f"{s.domain}, {len(tasks)} evaluation tasks x {s.eval_conversations} "
              f"conversations, {len(pairs)} held-out reply pairs, seed {config.trainer.seed}")
        print(format_table(rows))
        path = storage.path(config.trainer.workdir) / f"eval_{cfg.mode}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dump))
    return rows


def _fingerprint(pairs) -> str:
    h = hashlib.sha256()
    for c, r in zip(pairs.contexts, pairs.replies):
        h.update(repr((c, r)).encode())
    return h.hexdigest()[:16]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a CToM config: table 1/2 columns")
    p.add_argument("config", help="a configs/ctom_*.py file")
    p.add_argument("overrides", nargs="*", help="section.field=value")
    p.set_defaults(func=lambda args: (run_eval(args.config, args.overrides), 0)[1])
