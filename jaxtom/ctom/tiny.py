"""CToM's CPU default: a tiny decoder trained from scratch on the packing domain.

`prepare(config, mesh)` gives the policy a `jaxtom train` / `jaxtom eval` run starts from when
`model.path` is "": a byte-level BPE trained on the label-free teacher's transcripts (tags,
items and cues as whole tokens, Qwen3 chat turns), a random decoder, and the format warm-up:
supervised on the teacher's conversations in both prompts (CToM and direct; optionally on
the user's replies to its drafts, `reply_rows`, off by default), so that the
untrained-by-RL model is Prompting Base in direct mode and the starting point of CToM,
Naive GRPO and the ablations alike. All of it is saved in the run's directory (tokenizer.json,
warmup/) and reused on resume and by `jaxtom eval`.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, pre_tokenizers, trainers
from tokenizers import models as token_models

from jaxtom import storage
from jaxtom.ctom import packing
from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.policies import ScriptedPolicy
from jaxtom.ctom.prompts import ANSWER_MARKER
from jaxtom.ctom.simulators import ScriptedSimulator
from jaxtom.ctom.targets import fit_target, prediction_targets
from jaxtom.ctom.task_sets import training_tasks
from jaxtom.ctom.teacher import PackingTeacher
from jaxtom.models import init_decoder
from jaxtom.models.orbax_io import restore_params, save_model
from jaxtom.rl.trainer import Rollout, Trainer
from jaxtom.tokenizer import Tokenizer

PAD = "<pad>"
SPECIALS = (PAD, "<|endoftext|>", "<|im_start|>", "<|im_end|>")
CORPUS_CONVERSATIONS = 96


def bpe(texts, vocab_size: int) -> Tokenizer:
    """A byte-level BPE with Qwen3's chat specials; every protocol tag, the answer marker,
    stock phrase, item and cue is one token (with and without a leading space), so a list is
    eight tokens (slot names and items), a need five, and copying an item is copying one token."""
    tok = HFTokenizer(token_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(texts) or ["a"], trainer)
    words = packing.ITEMS + packing.CUES + packing.SLOT_NAMES
    glue = ["system\n", "user\n", "assistant\n"]  # chat turn headers: one token each
    phrases = list(packing.PHRASES) + [f" {p}" for p in packing.PHRASES]  # mid-reply too
    tok.add_tokens(list(P.TAGS) + [ANSWER_MARKER] + phrases + glue + list(words)
                   + [f" {w}" for w in words])
    return Tokenizer(tok, chat_format="qwen3", eos_tokens=("<|im_end|>", "<|endoftext|>"))


def teacher_conversations(tasks, tok, controller: ControllerConfig, rng: np.random.Generator,
                          disclosure: str = "mismatch"):
    """The teacher's conversations with the scripted user, in `controller.mode`."""
    policy = ScriptedPolicy(tok, PackingTeacher(rng, disclosure))
    return run_conversations(tasks, policy, ScriptedSimulator(packing_disclosure=disclosure),
                             tok, controller, key=jax.random.key(0))


def controllers(settings) -> dict[str, ControllerConfig]:
    """The run's CToM controller and its direct (baseline) twin, same caps."""
    base = {k: v for k, v in settings.controller.overrides().items() if k != "mode"}
    return {mode: ControllerConfig.for_domain(settings.domain, **base, mode=mode)
            for mode in ("ctom", "direct")}


def corpus(tasks, settings, seed: int) -> list[str]:
    """Transcripts for the BPE: teacher conversations in both modes through a bytes-only
    tokenizer (the same rendering the trained one will see)."""
    rng = np.random.default_rng([seed, 7717])
    pick = [tasks[i] for i in rng.choice(len(tasks), CORPUS_CONVERSATIONS)]
    raw = bpe([], 0)
    texts = []
    for ctrl in controllers(settings).values():
        for conv in teacher_conversations(pick, raw, ctrl, rng, settings.disclosure):
            texts += [raw.decode(seg.tokens) for seg in conv.sequences]
    return texts


def item_ids(tok) -> frozenset[int]:
    return frozenset(tok.token_to_id(w) for item in packing.ITEMS for w in (item, f" {item}"))


def weighted_mask(tokens, policy, items: frozenset[int], random_weight: float) -> list[float]:
    """The policy mask with each item the teacher drew at random (an item token not in the
    context before it: a guess, or a guessed reply) weighted by `random_weight`.

    Their targets are noise (uniform over a slot's items); at full weight their gradients
    drown the copying the warm-up must teach (revisions and later lists copy items from the
    context), and a from-scratch decoder does not learn to copy."""
    out, seen = [], set()
    for t, m in zip(tokens, policy):
        out.append(m * random_weight if m and t in items and t not in seen else m)
        seen.add(t)
    return out


def reply_rows(convs, tok, count: int, row_len: int, rng: np.random.Generator,
               disclosure: str = "mismatch"):
    """[(tokens, mask)]: `count` of eq. 2's prediction rows of the teacher's CToM
    conversations, drawn from `rng`: each draft's context, then the user's real or
    counterfactual reply to it (closed by [PREDICTION_END]), only the reply a target.

    They stand in for what a pretrained model brings to CToM and a model from scratch lacks:
    some knowledge of what users reply. The default has none (`ctom.warmup.reply_rows=0`),
    so every method starts from the same label-free model."""
    targets = prediction_targets(convs, ScriptedSimulator(packing_disclosure=disclosure))
    closing = tok.encode(P.PREDICTION_END)
    out = []
    for i in rng.permutation(len(targets))[:count]:
        fitted = fit_target(targets[i].context, tok.encode(targets[i].target), closing, row_len)
        if fitted is not None:
            out.append((list(fitted[0]) + list(fitted[1]),
                        [0.0] * len(fitted[0]) + [1.0] * len(fitted[1])))
    return out


class TeacherRollout:
    """Warm-up batches: each task's teacher conversation in CToM mode and in direct mode,
    every round's sequence a supervised row (the policy mask: what the policy writes, with
    random draws down-weighted: `weighted_mask`), plus `warmup.reply_rows` rows predicting
    the user's replies (`reply_rows`), advantage 1. Drawn from
    `default_rng([seed, step])`: the same after a resume."""

    def __init__(self, tok, settings, seed: int):
        self.tok, self.seed = tok, seed
        self.controllers = controllers(settings)
        self.items, self.random_weight = item_ids(tok), settings.warmup.random_weight
        self.reply_rows, self.row_len = settings.warmup.reply_rows, settings.pred_row_len
        self.disclosure = settings.disclosure

    def __call__(self, model, tasks, key, step) -> Rollout:
        rng = np.random.default_rng([self.seed, 9151, step])
        seqs, masks = [], []
        for ctrl in self.controllers.values():
            convs = teacher_conversations([r["task"] for r in tasks], self.tok, ctrl, rng,
                                          self.disclosure)
            for conv in convs:
                seqs += [list(s.tokens) for s in conv.sequences]
                masks += [weighted_mask(s.tokens, s.policy, self.items, self.random_weight)
                          for s in conv.sequences]
            if ctrl.mode == "ctom" and self.reply_rows:
                rows = reply_rows(convs, self.tok, self.reply_rows, self.row_len, rng,
                                  self.disclosure)
                seqs += [r for r, _ in rows]
                masks += [m for _, m in rows]
        return Rollout(seqs, masks, [1.0] * len(seqs), list(range(len(seqs))),
                       count=len(seqs), metrics={"rows": float(len(seqs)),
                                                 "row_tokens": float(np.mean(list(map(len, seqs))))})


def warmup_configs(config):
    w = config.ctom.warmup
    step = dataclasses.replace(config.step, learning_rate=w.learning_rate, kl_coef=0.0,
                               weight_decay=0.0, warmup_steps=min(10, w.steps), lambda_entropy=0.0,
                               lambda_pred=0.0, end_lr_ratio=0.0, reference="none")
    trainer = dataclasses.replace(
        config.trainer, workdir=str(storage.path(config.trainer.workdir) / "warmup_train"),
        total_steps=w.steps, prompts_per_step=w.batch_size, num_rows=0, eval_every=0,
        checkpoint_every=max(1, min(config.trainer.checkpoint_every, w.steps)),
        seed=config.trainer.seed + 1)
    return step, trainer


def model_and_tokenizer(config, mesh=None, *, warm_up: bool = True):
    """(model, tokenizer) of a from-scratch run: the run's tokenizer (trained and saved on
    first use) and a decoder initialised from `trainer.seed + model.seed`, after the format
    warm-up (run and saved on first use; `warm_up=False`: the random decoder)."""
    run_dir = storage.path(config.trainer.workdir)
    m, seed = config.model, config.trainer.seed + config.model.seed
    tasks = training_tasks(config.ctom, config.trainer.seed)
    path = run_dir / "tokenizer.json"
    if path.exists():
        tok = Tokenizer.from_file(path, chat_format="qwen3",
                                  eos_tokens=("<|im_end|>", "<|endoftext|>"))
    else:
        tok = bpe(corpus(tasks, config.ctom, config.trainer.seed), m.vocab_size)
        if jax.process_index() == 0:
            storage.save_tokenizer(path, tok.backend)
    mcfg = m.random_model_config(vocab_size=tok.vocab_size, eos_token_ids=tok.eos_token_ids,
                                 tie_word_embeddings=True, max_position_embeddings=1024)
    model = init_decoder(mcfg, seed, mesh=mesh)
    if not warm_up or not config.ctom.warmup.steps:
        return model, tok
    saved = run_dir / "warmup"
    if saved.exists():
        return restore_params(model, saved), tok
    step_cfg, trainer_cfg = warmup_configs(config)
    records = [{"prompt": tok.encode(t.prompt), "task": t} for t in tasks]
    warm = Trainer(model, records, TeacherRollout(tok, config.ctom, config.trainer.seed),
                   step_cfg, trainer_cfg, mesh=mesh, desc="ctom warm-up")
    model = warm.learner.model(warm.run())
    save_model(model, saved)
    return model, tok
