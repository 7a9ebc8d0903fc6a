"""Household QA by SSRL in miniature (MindZero section 5.3 / Table 4b on a CPU): the MindZero
QA default's tiny decoder (`mindzero.experiments.TINY_MODEL`, from scratch over a BPE trained on
the questions) reads compact household questions (`household.qa.compact_question`) from the
training apartments (0, 1, 2, 4, 5); a format warm-up on uniformly random letters (never the
answer), then SSRL on the label-free QA reward (`household.qa.rewards`: log max(P(last action
| chosen option), 1e-7)) with mirrored option order, as `configs/mindzero_qa_tiny.py` trains
the gridworld; then the model answers the held-out apartments' (3, 6) questions itself
(greedy), per type, beside the starting (warm-up) model and the model-free rows.
The last line is one JSON object with the figures.

    python benchmarks/household_qa_ssrl.py [--seed 0] [--steps 300] [--workdir runs/household_qa_ssrl]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import jax

from jaxtom.household import qa
from jaxtom.mindzero.household import qa_ssrl
from jaxtom.household.apartments import TEST_APARTMENTS, TRAIN_APARTMENTS, apartments
from jaxtom.household.episodes import generate_episodes
from jaxtom.mindzero.experiments import TINY_MODEL
from jaxtom.mindzero.policy import Codec, train_bpe
from jaxtom.mindzero.qa import QAWarmupRollout
from jaxtom.models import ModelConfig, init_decoder
from jaxtom.rl import StepConfig
from jaxtom.rl.trainer import Trainer, TrainerConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-episodes", type=int, default=100)
    ap.add_argument("--test-episodes", type=int, default=48)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workdir", default="runs/household_qa_ssrl")  # beside the configs' runs/
    args = ap.parse_args()
    t0 = time.perf_counter()
    work = Path(args.workdir) / f"seed{args.seed}"
    shutil.rmtree(work, ignore_errors=True)
    train_eps = generate_episodes(apartments(TRAIN_APARTMENTS), args.train_episodes,
                                  seed=args.seed)
    test_eps = generate_episodes(apartments(TEST_APARTMENTS), args.test_episodes,
                                 seed=1000 + args.seed)
    train_q = qa.make_questions(train_eps, seed=args.seed, per_type=2)
    test_q = qa.make_questions(test_eps, seed=args.seed + 1, per_type=2)
    texts = [qa.compact_question(train_eps[q.episode], q) for q in train_q]
    m = TINY_MODEL
    tok = train_bpe(texts + ["a", "b"] * 50, m.vocab_size)
    codec = Codec(tok)
    mcfg = ModelConfig(family="qwen3", vocab_size=tok.vocab_size, hidden_size=m.hidden_size,
                       intermediate_size=m.intermediate_size, num_layers=m.num_layers,
                       num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                       qk_norm=True, tie_word_embeddings=True, max_position_embeddings=256,
                       eos_token_ids=tok.eos_token_ids)
    model = init_decoder(mcfg, args.seed)
    prompts = qa_ssrl.QAPrompts("compact", codec, train_eps, train_q)
    longest = max(len(prompts(i)) for i in range(len(train_q)))
    row_len = int(-(-(longest + 4) // 16) * 16)
    tasks = qa_ssrl.question_tasks(train_q)
    setup_s = time.perf_counter() - t0
    # format warm-up: uniformly random letters
    wcfg = TrainerConfig(workdir=str(work / "warmup"), total_steps=args.warmup_steps,
                         prompts_per_step=32, group_size=1, max_new_tokens=1, row_len=row_len,
                         checkpoint_every=args.warmup_steps, progress=False, seed=args.seed + 1,
                         pad_id=codec.pad_id)
    wstep = StepConfig(learning_rate=3e-3, warmup_steps=10, total_steps=args.warmup_steps,
                       kl_coef=0.0, weight_decay=0.0, lambda_entropy=0.0, end_lr_ratio=0.0,
                       reference="none")
    warm = Trainer(model, tasks, QAWarmupRollout(codec, prompts, args.seed), wstep, wcfg)
    model = warm.learner.model(warm.run())
    start = model
    # SSRL
    scfg = TrainerConfig(workdir=str(work / "ssrl"), total_steps=args.steps, prompts_per_step=8,
                         group_size=8, temperature=1.0, max_new_tokens=1, row_len=row_len,
                         checkpoint_every=args.steps, progress=False, seed=args.seed,
                         pad_id=codec.pad_id)
    sstep = StepConfig(learning_rate=3e-4, warmup_steps=10, weight_decay=0.0, kl_coef=0.05,
                       max_grad_norm=1.0, total_steps=args.steps, end_lr_ratio=0.1)
    rollout = qa_ssrl.QARollout(scfg, codec, qa_ssrl.QAPrompts("compact", codec, train_eps,
                                                               train_q), mirror=True)
    ssrl = Trainer(start, tasks, rollout, sstep, scfg)
    trained = ssrl.learner.model(ssrl.run())
    train_s = time.perf_counter() - t0 - setup_s
    models = {"trained": (trained, codec), "start (warm-up)": (start, codec)}
    tables = qa_ssrl.evaluate_model(models, "compact", test_eps, test_q, max_new_tokens=1,
                                    key=jax.random.key(args.seed), seed=args.seed)
    print(qa.markdown(tables, f"Household QA SSRL, seed {args.seed}: {len(train_q)} training "
                              f"questions ({len(train_eps)} episodes, apartments "
                              f"{TRAIN_APARTMENTS}), {len(test_q)} held-out ({len(test_eps)} "
                              f"episodes, apartments {TEST_APARTMENTS}); setup {setup_s:.0f} s, "
                              f"training {train_s:.0f} s"))
    print(json.dumps({"seed": args.seed, "tables": tables, "setup_s": setup_s,
                      "train_s": train_s, "args": vars(args)},
                     default=float))


if __name__ == "__main__":
    main()
