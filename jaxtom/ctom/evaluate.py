"""`jaxtom eval CONFIG`: run evaluation conversations and print the paper's table 1/2
columns (score x100 with task-clustered SEM, visible turns and tokens, user replies and reply
tokens over conversations with a reply, ASK/DRAFT/COMMIT shares, lexical prediction F1)."""

from __future__ import annotations


import jax

from jaxtom import storage
from jaxtom.ctom.controller import ControllerConfig, Conversation, run_conversations
from jaxtom.ctom.metrics import (action_shares, clustered_mean_sem, conversation_f1,
                                 math_conversation_f1, user_effort)
from jaxtom.ctom.satisfaction import END_SIGNAL


def summarize(convs: list[Conversation], tok) -> dict[str, float]:
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
    out.update(action_shares(a for c in ok for a in c.actions))
    f1 = {}
    for c in ok:
        preds = [r.predictions[-1] if r.action == "DRAFT" and r.predictions else None
                 for r in c.rounds]
        if c.task.domain == "math":
            users = [t for r, t in c.visible if r == "user"]
            score = math_conversation_f1([p for p in preds if p is not None], users)
        else:
            score = conversation_f1(preds, [r.reply for r in c.rounds])
        if score is not None:
            f1.setdefault(c.task.id, []).append(100 * score)
    out["LexF1"], out["LexF1_sem"] = clustered_mean_sem(f1) if f1 else (float("nan"),) * 2
    return out


def format_table(name: str, s: dict[str, float]) -> str:
    def pm(k):
        return f"{s.get(k, float('nan')):.2f} ± {s.get(k + '_sem', float('nan')):.2f}"
    cols = ["Score", "Turns", "Tokens", "Replies", "ReplyTokens", "LexF1"]
    head = "Method | " + " | ".join(cols) + " | ASK | DRAFT | COMMIT"
    row = f"{name} | " + " | ".join(pm(c) for c in cols) + " | " + " | ".join(
        f"{s.get(a, 0.0):.1f}" for a in ("ASK", "DRAFT", "COMMIT"))
    return head + "\n" + row + f"\n({int(s.get('conversations', 0))} conversations, " \
        f"{int(s.get('failed', 0))} failed)"


def run_eval(config_path: str, overrides=()) -> dict[str, float]:
    from jaxtom.ctom import lockstep
    from jaxtom.ctom.policies import SamplerPolicy
    from jaxtom.ctom.train import (CToMTrainer, load_ctom_config, load_model_and_tokenizer,
                                   make_simulator)
    from jaxtom.ctom.data import load_tasks
    from jaxtom.rl.checkpoint import Checkpointer
    config, s = load_ctom_config(config_path, overrides)
    model, tok = load_model_and_tokenizer(config)
    tasks = load_tasks(s.domain, None if s.tasks == "builtin" else s.tasks)
    tasks = tasks[:s.eval_tasks or s.num_tasks or len(tasks)]
    ckpt_dir = storage.path(config.trainer.workdir) / "checkpoints"
    source = "untrained"
    if ckpt_dir.exists():
        trainer = CToMTrainer(model, tok, tasks, config.step, config.trainer, s)
        ckpt = Checkpointer(ckpt_dir, keep=config.trainer.keep_checkpoints)
        if ckpt.latest_step() is not None:
            state, _ = ckpt.restore(trainer.learner.init_state(model, seed=config.trainer.seed))
            model = trainer.learner.model(state)
            source = f"checkpoint {ckpt.latest_step()}"
        ckpt.close()
    cfg = ControllerConfig.for_domain(s.domain, **s.controller)
    policy = SamplerPolicy(model, tok, temperature=config.trainer.temperature,
                           reuse_cache=s.reuse_cache)
    # on several processes every process runs every conversation (jaxtom.ctom.lockstep)
    convs = run_conversations([t for t in tasks for _ in range(s.eval_conversations)], policy,
                              lockstep.shared_simulator(make_simulator(s)), tok, cfg,
                              key=jax.random.key(config.trainer.seed + 1),
                              host_map=lockstep.shared_map)
    summary = summarize(convs, tok)
    method = "CToM"
    if cfg.mode == "direct":  # appendix C.2 baselines: untrained vs GRPO-trained
        method = "Prompting Base" if source == "untrained" else "Naive GRPO"
    if jax.process_index() == 0:
        print(format_table(f"{method} {s.domain} ({source})", summary))
    return summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a CToM config: table 1/2 columns")
    p.add_argument("config", help="a configs/ctom_*.py file")
    p.add_argument("overrides", nargs="*", help="section.field=value")
    p.set_defaults(func=lambda args: (run_eval(args.config, args.overrides), 0)[1])
