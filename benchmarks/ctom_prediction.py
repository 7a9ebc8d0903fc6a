"""CToM's prediction claim in miniature: does the NLL term teach the model to predict replies?

Section 4.2 trains the assistant's predictions u^(k) with an NLL on the simulated user's real
and counterfactual replies (eq. 2, weighted by lambda_pred and capped by eta). Here
SmolLM2-135M-Instruct with LoRA adapters trains on short writing or math tasks against the
scripted user simulator, twice from the same seed and for the same steps: with
`step.lambda_pred=1` and with `step.lambda_pred=0` (GRPO alone). Before training, the
untrained model's conversations on held-out tasks (never trained on) give a fixed set of
(context, real reply) pairs: the token prefix each prediction was sampled from, and the reply
the simulator gave to that draft (real or counterfactual), closed by the prediction end tag,
exactly what eq. 2 supervises. Each pair's mean per-token NLL is measured on the untrained
model and on both trained ones; the script prints the means with standard errors over pairs
and the paired changes (trained - untrained), and ends with one JSON object.

    python benchmarks/ctom_prediction.py [--domain writing --steps 8 --seed 0 --lr 2e-3
        --rank 8 --prompts-per-step 1 --group-size 2 --pred-rows 2 --train-tasks 10
        --pred-row-len 512 --heldout-tasks 5 --heldout-conversations 3 --heldout-rounds 2]

Everything runs in this process; each training run writes to a temporary workdir.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time

import numpy as np

from jaxtom.config import apply_overrides
from jaxtom.ctom import experiments
from jaxtom.ctom.data import load_tasks
from jaxtom.ctom.heldout import heldout_pairs, mean_se, pair_nll
from jaxtom.ctom.train import (
    conversation_trainer,
    load_model_and_tokenizer,
    make_simulator,
    sampler_policy,
)

try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run


def train_one(config, tok, tasks, lambda_pred: float, workdir: str):
    """Trains a fresh copy of the model (same seed, same steps) and returns it with its
    per-step metrics."""
    config = apply_overrides(config, [f"step.lambda_pred={lambda_pred}",
                                      f"trainer.workdir={workdir}"])
    model, _ = load_model_and_tokenizer(config)
    trainer = conversation_trainer(model, tok, tasks, config.step, config.trainer, config.ctom)
    state = trainer.run()
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    return trainer.learner.model(state), metrics


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="writing", choices=("writing", "math"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=1)
    ap.add_argument("--group-size", type=int, default=2)
    ap.add_argument("--pred-rows", type=int, default=2,
                    help="prediction rows per update (0: one per target, rounded up to 8); "
                         "targets beyond it are counted as dropped in the run's metrics")
    ap.add_argument("--pred-row-len", type=int, default=512,
                    help="tokens per prediction row, in training and here: a longer context "
                         "keeps its nearest tokens (the trainer's own fit_target)")
    ap.add_argument("--train-tasks", type=int, default=10)
    ap.add_argument("--heldout-tasks", type=int, default=5)
    ap.add_argument("--heldout-conversations", type=int, default=3)
    ap.add_argument("--heldout-rounds", type=int, default=2,
                    help="visible rounds of a held-out conversation (a real reply to a shown "
                         "draft needs a next round; training keeps the config's rounds)")
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_args(argv)
    record = Run("ctom_prediction")

    config = apply_overrides(experiments.smollm2_config(args.domain), [
        f"model.lora_rank={args.rank}", f"model.lora_alpha={float(args.rank)}", "step.lora=true",
        f"step.learning_rate={args.lr}", 
        f"trainer.total_steps={args.steps}", f"trainer.checkpoint_every={args.steps}",
        f"trainer.seed={args.seed}", f"trainer.prompts_per_step={args.prompts_per_step}",
        f"trainer.group_size={args.group_size}", f"ctom.pred_rows={args.pred_rows}",
        f"ctom.pred_row_len={args.pred_row_len}",
        "trainer.num_rows=0"])
    row_len = config.ctom.pred_row_len
    s = config.ctom
    all_tasks = load_tasks(s.domain)
    train_tasks = all_tasks[:args.train_tasks]
    held = all_tasks[args.train_tasks:args.train_tasks + args.heldout_tasks]
    if not held:
        raise SystemExit(f"no held-out tasks: {len(all_tasks)} {s.domain} tasks, "
                         f"--train-tasks {args.train_tasks}")
    t0 = time.time()
    model0, tok = load_model_and_tokenizer(config)
    # the untrained model's conversations (held-out rounds), its predictions' contexts and
    # the user's real and counterfactual replies
    cfg = s.controller_config(max_rounds=args.heldout_rounds)
    pairs = heldout_pairs(sampler_policy(model0, tok, s, temperature=config.trainer.temperature),
                          make_simulator(s), tok, held, cfg,
                          conversations=args.heldout_conversations, row_len=row_len,
                          seed=args.seed + 12345)
    if len(pairs) < 2:
        raise SystemExit(f"only {len(pairs)} held-out pairs")
    kinds = ["counterfactual" if c else "real" for c in pairs.counterfactual]
    print(f"{len(pairs)} held-out pairs ({kinds.count('real')} real, "
          f"{kinds.count('counterfactual')} counterfactual) from {len(held)} held-out "
          f"{s.domain} tasks x {args.heldout_conversations}; reply tokens per pair "
          f"{np.mean([len(r) for r in pairs.replies]):.1f}", flush=True)
    base = pair_nll(model0, pairs, row_len, rows_per_call=4)
    real = np.asarray([k == "real" for k in kinds])
    results = {"domain": s.domain, "steps": args.steps, "seed": args.seed, "lr": args.lr,
               "lora_rank": args.rank, "train_tasks": len(train_tasks),
               "heldout_tasks": len(held), "pairs": len(pairs),
               "real_pairs": kinds.count("real"),
               "nll_untrained": mean_se(base)}
    for lam in (1.0, 0.0):
        t = time.time()
        with tempfile.TemporaryDirectory() as workdir:
            model, metrics = train_one(config, tok, train_tasks, lam, workdir)
        nll = pair_nll(model, pairs, row_len, rows_per_call=4)
        name = f"lambda_pred={lam:g}"
        results[f"nll_{name}"] = mean_se(nll)
        results[f"change_{name}"] = mean_se(nll - base)
        results[f"change_real_{name}"] = mean_se((nll - base)[real])
        results[f"train_loss_pred_{name}"] = [round(m.get("loss_pred", math.nan), 4)
                                              for m in metrics]
        results[f"train_seconds_{name}"] = round(time.time() - t, 1)
        results[f"_nll_{name}"] = nll
        results[f"pred_targets_trained_{name}"] = sum(
            m.get("pred/prediction_targets_trained", 0.0) for m in metrics)
        results[f"pred_targets_{name}"] = sum(m.get("pred/prediction_targets", 0.0)
                                              for m in metrics)
        print(f"{name}: held-out NLL {results[f'nll_{name}'][0]:.3f}, per-step train "
              f"loss_pred {results[f'train_loss_pred_{name}']}, "
              f"{results[f'train_seconds_{name}']} s", flush=True)
    diff = results.pop("_nll_lambda_pred=1") - results.pop("_nll_lambda_pred=0")
    results["difference_1_minus_0"] = mean_se(diff)
    results["seconds"] = round(time.time() - t0, 1)

    print(f"\nheld-out prediction NLL (nats/token, mean ± SE over {len(pairs)} pairs), "
          f"{s.domain}, {args.steps} steps, seed {args.seed}:")
    print("| model | NLL | change vs untrained | change, real replies only |\n|---|---|---|---|")
    m, e = results["nll_untrained"]
    print(f"| untrained | {m:.3f} ± {e:.3f} | | |")
    for lam in ("1", "0"):
        m, e = results[f"nll_lambda_pred={lam}"]
        cm, ce = results[f"change_lambda_pred={lam}"]
        rm, re_ = results[f"change_real_lambda_pred={lam}"]
        print(f"| lambda_pred={lam} | {m:.3f} ± {e:.3f} | {cm:+.3f} ± {ce:.3f} "
              f"| {rm:+.3f} ± {re_:.3f} |")
    dm, de = results["difference_1_minus_0"]
    print(f"paired difference (lambda_pred=1 - lambda_pred=0): {dm:+.3f} ± {de:.3f}")
    record.emit(results, save=args.save)
    return results


if __name__ == "__main__":
    main()
