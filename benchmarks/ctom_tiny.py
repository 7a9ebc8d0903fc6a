"""CToM's claims in miniature on a CPU (issue 35): the packing default over seeds, with Naive
GRPO, Prompting Base and the ablations, pooled.

For each (seed, variant) it runs, as a user would, `jaxtom train configs/ctom_tiny.py
trainer.seed=S trainer.workdir=runs/ctom_tiny/sS_VARIANT OVERRIDES` and `jaxtom eval` with the
same arguments (skipped when the run's eval file exists and --rerun is not given), timing each
command; then it reads every run's `eval_<mode>.json` and prints the per-seed table, the pooled
table, and the paired comparisons the issue asks for, ending with one JSON line:

  * task score: CToM vs Naive GRPO and vs Prompting Base, the difference of means with a
    task-clustered SE of the per-task differences (eq. 10; the same held-out tasks per seed);
  * user replies (over conversations with a reply, Table 2) and the share of conversations
    that needed a reply at all (one visible round and its reply: the former is 1 by
    construction): CToM vs CToM w/o prediction;
  * held-out reply-prediction NLL: the drop from the warm-up, CToM vs w/o prediction, paired
    over the same (context, reply) pairs (checked by fingerprint), clustered by task;
  * lexical F1 of predicted vs real replies: CToM trained vs its warm-up.

Variants share their seed's warm-up: it is deterministic (same seed, same teacher draws), so a
variant copies tokenizer.json and warmup/ from the seed's first run instead of recomputing it
(--no-reuse-warmup recomputes; the JSON records which).

    python benchmarks/ctom_tiny.py [--seeds 0,1,2 --variants ctom,naive,wopred]
        [--extra-seed0 woeffort,taskonly] [--rerun] [--report-only]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

VARIANTS = {
    "ctom": ([], "ctom", "CToM"),
    "naive": (["ctom.controller.mode=direct"], "direct", "Naive GRPO"),
    "wopred": (["step.lambda_pred=0.0"], "ctom", "CToM w/o prediction"),
    "woeffort": (["ctom.controller.w_effort=0"], "ctom", "CToM w/o effort"),
    "taskonly": (["step.lambda_pred=0.0", "ctom.controller.w_effort=0"], "ctom",
                 "CToM task-only"),
}
CONFIG = "configs/ctom_tiny.py"


def run_dir(root: Path, seed: int, variant: str) -> Path:
    return root / f"s{seed}_{variant}"


def run(root: Path, seed: int, variant: str, rerun: bool, reuse_warmup: bool) -> dict:
    """Trains and evaluates one (seed, variant) through the CLI; wall seconds of each."""
    overrides, mode, _ = VARIANTS[variant]
    wd = run_dir(root, seed, variant)
    out = {"seed": seed, "variant": variant, "workdir": str(wd)}
    if (wd / f"eval_{mode}.json").exists() and not rerun:
        return {**out, "skipped": True}
    if rerun and wd.exists():
        shutil.rmtree(wd)
    donor = next((run_dir(root, seed, v) for v in VARIANTS if v != variant
                  and (run_dir(root, seed, v) / "warmup").exists()), None)
    if reuse_warmup and donor is not None and not (wd / "warmup").exists():
        wd.mkdir(parents=True, exist_ok=True)
        shutil.copy(donor / "tokenizer.json", wd / "tokenizer.json")
        shutil.copytree(donor / "warmup", wd / "warmup")
        out["warmup_from"] = str(donor)
    args = [CONFIG, f"trainer.seed={seed}", f"trainer.workdir={wd}", "trainer.progress=false",
            *overrides]
    for command in ("train", "eval"):
        t = time.time()
        subprocess.run([sys.executable, "-m", "jaxtom.cli", command, *args], check=True)
        out[f"{command}_s"] = round(time.time() - t, 1)
    return out


# ---- statistics ------------------------------------------------------------------------
def clustered(values_by_task: dict) -> tuple[float, float]:
    """Mean and task-clustered SEM (eq. 10) of per-conversation values."""
    from jaxtom.ctom.metrics import clustered_mean_sem
    return clustered_mean_sem({k: v for k, v in values_by_task.items() if v})


def task_means(records, field) -> dict:
    out: dict = {}
    for r in records:
        if r["failed"]:
            continue
        v = field(r)
        if v is not None:
            out.setdefault(r["task"], []).append(float(v))
    return out


def paired(a: dict, b: dict) -> tuple[float, float, int]:
    """Mean over tasks in both of (mean a - mean b), and its SE over tasks."""
    common = sorted(set(a) & set(b))
    d = np.asarray([np.mean(a[t]) - np.mean(b[t]) for t in common])
    if len(d) < 2:
        return float("nan"), float("nan"), len(d)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))), len(d)


FIELDS = {
    "score": lambda r: 100 * r["score"],
    "replies": lambda r: len(r["replies"]) if r["replies"] else None,
    "replied": lambda r: 100.0 * bool(r["replies"]),  # % of conversations needing a reply
    "lex_f1": lambda r: None if r["lex_f1"] is None else 100 * r["lex_f1"],
}


def load(root: Path, seeds, variants) -> dict:
    """{(seed, method): {"records", "pair_nll", "pair_tasks", "fingerprint", "summary"}}."""
    out = {}
    for seed in seeds:
        for variant in variants:
            _, mode, _ = VARIANTS[variant]
            path = run_dir(root, seed, variant) / f"eval_{mode}.json"
            if not path.exists():
                continue
            data = json.loads(path.read_text())
            for name, m in data["methods"].items():
                if name == "CToM untrained" and variant != "ctom":
                    continue  # the same warm-up: keep one copy per seed
                out[(seed, name)] = {"records": m["conversations"], "pair_nll": m["pair_nll"],
                                     "pair_tasks": data["pair_tasks"],
                                     "fingerprint": data["pair_fingerprint"],
                                     "summary": m["summary"]}
    return out


def pooled(results: dict, method: str, field: str, seeds) -> tuple[float, float]:
    merged: dict = {}
    for seed in seeds:
        if (seed, method) in results:
            merged.update(task_means(results[(seed, method)]["records"], FIELDS[field]))
    return clustered(merged) if merged else (float("nan"), float("nan"))


def pooled_paired(results: dict, a: str, b: str, field: str, seeds):
    da, db = {}, {}
    for seed in seeds:
        if (seed, a) in results and (seed, b) in results:
            da.update(task_means(results[(seed, a)]["records"], FIELDS[field]))
            db.update(task_means(results[(seed, b)]["records"], FIELDS[field]))
    return paired(da, db)


def nll_drop_difference(results: dict, seeds, a="CToM", b="CToM w/o prediction"):
    """Mean over pairs of NLL_b - NLL_a (= drop_a - drop_b from the same warm-up NLL), with a
    task-clustered SE; pairs must be the same (fingerprint)."""
    from jaxtom.ctom.metrics import clustered_mean_sem
    by_task: dict = {}
    for seed in seeds:
        ra, rb = results.get((seed, a)), results.get((seed, b))
        if ra is None or rb is None:
            continue
        if ra["fingerprint"] != rb["fingerprint"]:
            raise RuntimeError(f"seed {seed}: {a} and {b} were scored on different pairs")
        for task, x, y in zip(ra["pair_tasks"], ra["pair_nll"], rb["pair_nll"]):
            by_task.setdefault((seed, task), []).append(y - x)
    return clustered_mean_sem(by_task) if by_task else (float("nan"), float("nan"))


def table(results: dict, seeds, methods) -> str:
    cols = ["Score", "Turns", "Tokens", "Replied", "Replies", "ReplyTokens", "PredNLL",
            "LexF1", "RevGain"]
    lines = ["seed | method | " + " | ".join(cols)]
    for seed in seeds:
        for m in methods:
            s = results.get((seed, m), {}).get("summary")
            if s:
                s = dict(s)  # Replied from the records (summaries before it lack the column)
                s["Replied"], s["Replied_sem"] = pooled(results, m, "replied", [seed])
                lines.append(f"{seed} | {m} | " + " | ".join(
                    f"{s.get(c, float('nan')):.2f} ± {s.get(c + '_sem', float('nan')):.2f}"
                    for c in cols))
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/ctom_tiny")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--variants", default="ctom,naive,wopred")
    ap.add_argument("--extra-seed0", default="woeffort,taskonly")
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--no-reuse-warmup", action="store_true")
    args = ap.parse_args(argv)
    root = Path(args.root)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    extra = [v for v in args.extra_seed0.split(",") if v]
    timings = []
    if not args.report_only:
        for seed in seeds:
            for variant in variants + (extra if seed == seeds[0] else []):
                timings.append(run(root, seed, variant, args.rerun, not args.no_reuse_warmup))
                print(json.dumps(timings[-1]), flush=True)
    results = load(root, seeds, variants + extra)
    methods = ["CToM", "Naive GRPO", "Prompting Base", "CToM untrained", "CToM w/o prediction",
               "CToM w/o effort", "CToM task-only"]
    print(table(results, seeds, methods))
    summary: dict = {"seeds": seeds, "timings": timings, "pooled": {}}
    print("\npooled over seeds " + ",".join(map(str, seeds)) + " (task-clustered SE)")
    for m in methods:
        row = {f: pooled(results, m, f, seeds) for f in FIELDS}
        if not any(np.isfinite(v[0]) for v in row.values()):
            continue
        summary["pooled"][m] = {f: [round(x, 3) for x in v] for f, v in row.items()}
        print(f"{m}: score {row['score'][0]:.2f} ± {row['score'][1]:.2f}, replies "
              f"{row['replies'][0]:.2f} ± {row['replies'][1]:.2f}, needing a reply "
              f"{row['replied'][0]:.1f}% ± {row['replied'][1]:.1f}, lexical F1 "
              f"{row['lex_f1'][0]:.2f} ± {row['lex_f1'][1]:.2f}")
    comparisons = {
        "score CToM - Naive GRPO": pooled_paired(results, "CToM", "Naive GRPO", "score", seeds),
        "score CToM - Prompting Base": pooled_paired(results, "CToM", "Prompting Base", "score",
                                                     seeds),
        "score CToM - CToM w/o prediction": pooled_paired(results, "CToM",
                                                          "CToM w/o prediction", "score", seeds),
        "replies CToM - CToM w/o prediction": pooled_paired(
            results, "CToM", "CToM w/o prediction", "replies", seeds),
        "conversations needing a reply (%) CToM - CToM w/o prediction": pooled_paired(
            results, "CToM", "CToM w/o prediction", "replied", seeds),
        "lexical F1 CToM - CToM untrained": pooled_paired(results, "CToM", "CToM untrained",
                                                          "lex_f1", seeds),
    }
    drop = nll_drop_difference(results, seeds)
    print("\npaired comparisons (mean ± SE, in SE units)")
    for name, (d, se, n) in comparisons.items():
        units = f"{d / se:+.1f} SE" if se > 0 else "no spread"  # e.g. replies all 1 (N = 2)
        print(f"{name}: {d:+.2f} ± {se:.2f} ({units}, {n} tasks)")
    print(f"NLL drop from the warm-up, CToM - CToM w/o prediction: {drop[0]:+.3f} ± "
          f"{drop[1]:.3f} nats/token ({drop[0] / drop[1]:+.1f} SE)")
    summary["comparisons"] = {k: [round(v[0], 3), round(v[1], 3), v[2]]
                              for k, v in comparisons.items()}
    summary["nll_drop_ctom_minus_wopred"] = [round(drop[0], 4), round(drop[1], 4)]
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
