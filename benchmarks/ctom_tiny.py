"""CToM's claims in miniature on a CPU (issue 63): the packing default over seeds, every
method on the same rules, pooled.

The rules are fixed in `jaxtom/ctom/packing.py` and `configs/ctom_tiny.py` before any run:
the user reveals at most the single most important mismatch of the list it is shown (or only
which slot is wrong, `ctom.disclosure=which`), every method gets two visible rounds and the
same token budget, one advantage normalisation and one effort weight. For each (seed,
variant) it runs, as a user would, `jaxtom train configs/ctom_tiny.py trainer.seed=S
trainer.workdir=ROOT/sS_VARIANT OVERRIDES` and `jaxtom eval` with the same arguments (skipped
when the run's eval file exists and --rerun is not given); then it reads every run's
`eval_<mode>.json` and prints the per-seed table, the pooled table and paired differences
(same held-out tasks per seed; task-clustered SE of the per-task differences), and ends with
one JSON line that `--save` also writes, with versions and machine, to benchmarks/results/.

Variants (the paper's methods, section 5.1.2, and a label-matched control):
  ctom          CToM                       naive      Naive GRPO (Prompting Base: its warm-up)
  wopred        CToM w/o prediction        naive_nll  Naive GRPO + the same eta-capped NLL on
  naive_wall    Naive GRPO given CToM's                its own real replies (ctom.reply_nll)
                training wall time (steps = CToM's summed step seconds / Naive GRPO's mean)
  *_which       the same under the math user's rule (which slot, never the item)
Variants of a seed and disclosure share its warm-up (deterministic: same seed, same teacher
draws): a variant copies tokenizer.json and warmup/ from the first run that has them.

    python benchmarks/ctom_tiny.py --root runs/c64 --seeds 0,1,2,3,4 \
        --variants ctom,naive,wopred,naive_nll,naive_wall [--extra-seed0 ctom_which,...]
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

try:
    from benchmarks.provenance import load as load_average, machine
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import load as load_average, machine

CONFIG = "configs/ctom_tiny.py"
BASE_STEPS = 60  # configs/ctom_tiny.py's trainer.total_steps
DIRECT = ["ctom.controller.mode=direct"]
WHICH = ["ctom.disclosure=which"]
# variant -> (overrides, eval mode, trained method's label, warm-up group)
VARIANTS = {
    "ctom": ([], "ctom", "CToM", "mismatch"),
    "naive": (DIRECT, "direct", "Naive GRPO", "mismatch"),
    "wopred": (["step.lambda_pred=0.0"], "ctom", "CToM w/o prediction", "mismatch"),
    "naive_nll": (DIRECT + ["ctom.reply_nll=true"], "direct", "Naive GRPO + reply NLL",
                  "mismatch"),
    "naive_wall": (DIRECT, "direct", "Naive GRPO (CToM's wall time)", "mismatch"),
    "ctom_which": (WHICH, "ctom", "CToM [which]", "which"),
    "naive_which": (WHICH + DIRECT, "direct", "Naive GRPO [which]", "which"),
    "wopred_which": (WHICH + ["step.lambda_pred=0.0"], "ctom", "CToM w/o prediction [which]",
                     "which"),
    "naive_nll_which": (WHICH + DIRECT + ["ctom.reply_nll=true"], "direct",
                        "Naive GRPO + reply NLL [which]", "which"),
}
# the warm-up's row in a variant's eval: the method it is in that variant's mode
UNTRAINED = {"ctom": "CToM untrained", "naive": "Prompting Base",
             "ctom_which": "CToM untrained [which]", "naive_which": "Prompting Base [which]"}


def run_dir(root: Path, seed: int, variant: str) -> Path:
    return root / f"s{seed}_{variant}"


def step_seconds(wd: Path) -> list[float]:
    rows = [json.loads(line) for line in (wd / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    key = "time/step_seconds"
    return [r.get(key, r.get("step_seconds")) for r in rows
            if key in r or "step_seconds" in r]


def wall_matched_steps(root: Path, seed: int) -> int:
    """Naive GRPO steps that take CToM's training wall time (both measured on this seed, from
    the trainer's `time/step_seconds`)."""
    ctom, naive = (step_seconds(run_dir(root, seed, v)) for v in ("ctom", "naive"))
    if not ctom or not naive:
        raise RuntimeError(f"seed {seed}: naive_wall needs the ctom and naive runs first")
    return max(BASE_STEPS, int(round(sum(ctom) / float(np.mean(naive)))))


def run(root: Path, seed: int, variant: str, rerun: bool) -> dict:
    """Trains and evaluates one (seed, variant) through the CLI; wall seconds of each."""
    overrides, mode, _, group = VARIANTS[variant]
    overrides = list(overrides)
    wd = run_dir(root, seed, variant)
    out = {"seed": seed, "variant": variant, "run": wd.name}  # a directory under --root
    if variant == "naive_wall":
        steps = wall_matched_steps(root, seed)
        overrides += [f"trainer.total_steps={steps}"]
        out["steps"] = steps
    if (wd / f"eval_{mode}.json").exists() and not rerun:
        return {**out, "skipped": True}
    if rerun and wd.exists():
        shutil.rmtree(wd)
    donor = next((run_dir(root, seed, v) for v, spec in VARIANTS.items()
                  if v != variant and spec[3] == group
                  and (run_dir(root, seed, v) / "warmup").exists()), None)
    if donor is not None and not (wd / "warmup").exists():
        wd.mkdir(parents=True, exist_ok=True)
        shutil.copy(donor / "tokenizer.json", wd / "tokenizer.json")
        shutil.copytree(donor / "warmup", wd / "warmup")
        out["warmup_from"] = donor.name
    args = [CONFIG, f"trainer.seed={seed}", f"trainer.workdir={wd}", "trainer.progress=false",
            *overrides]
    for command in ("train", "eval"):
        t = time.time()
        subprocess.run([sys.executable, "-m", "jaxtom.cli", command, *args], check=True)
        out[f"{command}_s"] = round(time.time() - t, 1)
    secs = step_seconds(wd)
    out["rl_s"], out["rl_steps"] = round(sum(secs), 1), len(secs)
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
    "replies": lambda r: len(r["replies"]) if r["replies"] else None,  # Table 2: with a reply
    "reply_tokens": lambda r: sum(r["replies"]) if r["replies"] else None,
    "effort": lambda r: 100 * r["effort"] if "effort" in r else None,
    "lex_f1": lambda r: None if r["lex_f1"] is None else 100 * r["lex_f1"],
    "lex_f1_floor": lambda r: None if r.get("lex_f1_floor") is None else 100 * r["lex_f1_floor"],
}


def load(root: Path, seeds, variants) -> dict:
    """{(seed, method): {"records", "pair_nll", "pair_tasks", "fingerprint", "summary",
    "revisions"}}: each variant's trained model under its label, and the warm-up once per
    seed and mode (`UNTRAINED`)."""
    out = {}
    for seed in seeds:
        for variant in variants:
            _, mode, label, _ = VARIANTS[variant]
            path = run_dir(root, seed, variant) / f"eval_{mode}.json"
            if not path.exists():
                continue
            data = json.loads(path.read_text())
            for m in data["methods"].values():
                trained = m["source"].startswith("checkpoint")
                if not trained and variant not in UNTRAINED:
                    continue
                name = label if trained else UNTRAINED[variant]
                out[(seed, name)] = {"records": m["conversations"], "pair_nll": m["pair_nll"],
                                     "pair_tasks": data["pair_tasks"],
                                     "fingerprint": data["pair_fingerprint"],
                                     "summary": m["summary"]}
    return out


def pooled(results: dict, method: str, field: str, seeds) -> tuple[float, float]:
    merged: dict = {}
    for seed in seeds:
        if (seed, method) in results:
            merged.update({(seed, k): v for k, v in task_means(
                results[(seed, method)]["records"], FIELDS[field]).items()})
    return clustered(merged) if merged else (float("nan"), float("nan"))


def pooled_paired(results: dict, a: str, b: str, field: str, seeds):
    da, db = {}, {}
    for seed in seeds:
        if (seed, a) in results and (seed, b) in results:
            da.update({(seed, k): v for k, v in task_means(
                results[(seed, a)]["records"], FIELDS[field]).items()})
            db.update({(seed, k): v for k, v in task_means(
                results[(seed, b)]["records"], FIELDS[field]).items()})
    return paired(da, db)


def pooled_revision_gain(results: dict, method: str, seeds) -> tuple[float, float, int]:
    """Eq. 8 over every revised round of the method's conversations, pooled over seeds."""
    from jaxtom.ctom.metrics import self_revision_gain
    pairs = [tuple(p) for seed in seeds if (seed, method) in results
             for r in results[(seed, method)]["records"] if not r["failed"]
             for p in r["revisions"]]
    return (*self_revision_gain(pairs), len(pairs))


def nll_difference(results: dict, seeds, a: str, b: str):
    """Mean over the same held-out pairs of NLL_b - NLL_a (nats/token), task-clustered SE."""
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


COLS = ["Score", "Turns", "Tokens", "Replies", "ReplyTokens", "Effort", "PredNLL", "LexF1",
        "LexF1Floor", "RevGain"]


def table(results: dict, seeds, methods) -> str:
    lines = ["seed | method | " + " | ".join(COLS)]
    for seed in seeds:
        for m in methods:
            s = results.get((seed, m), {}).get("summary")
            if s:
                lines.append(f"{seed} | {m} | " + " | ".join(
                    f"{s.get(c, float('nan')):.2f} ± {s.get(c + '_sem', float('nan')):.2f}"
                    for c in COLS))
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/ctom_tiny")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--variants", default="ctom,naive,wopred,naive_nll,naive_wall")
    ap.add_argument("--extra-seed0", default="ctom_which,naive_which")
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--save", default="", help="also write the JSON line to this file")
    args = ap.parse_args(argv)
    root = Path(args.root)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    extra = [v for v in args.extra_seed0.split(",") if v]
    start = machine()
    timings = []
    if not args.report_only:
        for seed in seeds:
            for variant in variants + (extra if seed == seeds[0] else []):
                timings.append(run(root, seed, variant, args.rerun))
                print(json.dumps(timings[-1]), flush=True)
    results = load(root, seeds, list(VARIANTS))
    methods = list(dict.fromkeys(name for _, name in sorted(results, key=lambda k: k[0])))
    print(table(results, seeds, methods))
    summary: dict = {"seeds": seeds, "timings": timings, "pooled": {}, "provenance": start,
                     "per_seed": {f"{seed}|{m}": {c: [round(r["summary"].get(c, math.nan), 3),
                                                       round(r["summary"].get(c + "_sem",
                                                                              math.nan), 3)]
                                                   for c in COLS}
                                  for (seed, m), r in sorted(results.items(),
                                                             key=lambda kv: kv[0][0])}}
    print("\npooled over seeds " + ",".join(map(str, seeds)) + " (task-clustered SE)")
    for m in methods:
        row = {f: pooled(results, m, f, seeds) for f in FIELDS}
        gain = pooled_revision_gain(results, m, seeds)
        summary["pooled"][m] = {**{f: [round(x, 3) for x in v] for f, v in row.items()},
                                "rev_gain": [round(gain[0], 3), round(gain[1], 3), gain[2]]}
        print(f"{m}: " + ", ".join(f"{f} {v[0]:.2f} ± {v[1]:.2f}" for f, v in row.items())
              + f", rev_gain {gain[0]:.2f} ± {gain[1]:.2f} ({gain[2]} rounds)")
    base = [("CToM", "Naive GRPO"), ("CToM", "Naive GRPO + reply NLL"),
            ("CToM", "CToM w/o prediction"), ("CToM", "Prompting Base"),
            ("CToM", "Naive GRPO (CToM's wall time)"),
            ("Naive GRPO + reply NLL", "Naive GRPO"), ("CToM w/o prediction", "Naive GRPO"),
            ("CToM [which]", "Naive GRPO [which]"),
            ("CToM [which]", "Naive GRPO + reply NLL [which]"),
            ("CToM [which]", "CToM w/o prediction [which]"),
            ("CToM [which]", "Prompting Base [which]")]
    comparisons = {}
    for a, b in base:
        for field in ("score", "replies", "effort"):
            d = pooled_paired(results, a, b, field, seeds)
            if d[2]:
                comparisons[f"{field}: {a} - {b}"] = d
    for a, b in (("CToM", "CToM w/o prediction"), ("CToM", "Naive GRPO + reply NLL"),
                 ("CToM [which]", "CToM w/o prediction [which]")):
        d = pooled_paired(results, a, b, "lex_f1", seeds)
        if d[2]:
            comparisons[f"lex_f1: {a} - {b}"] = d
    print("\npaired differences over the same held-out tasks (mean ± SE, in SE units)")
    for name, (d, se, n) in comparisons.items():
        units = f"{d / se:+.1f} SE" if se > 0 else "no spread"
        print(f"{name}: {d:+.2f} ± {se:.2f} ({units}, {n} tasks)")
    summary["comparisons"] = {k: [round(v[0], 3), round(v[1], 3), v[2]]
                              for k, v in comparisons.items()}
    nll = {}
    for a, b in (("CToM", "CToM untrained"), ("CToM w/o prediction", "CToM untrained"),
                 ("CToM", "CToM w/o prediction")):
        d = nll_difference(results, seeds, a, b)
        if np.isfinite(d[0]):
            nll[f"{b} - {a}"] = [round(d[0], 4), round(d[1], 4)]
            print(f"held-out reply NLL, {b} - {a}: {d[0]:+.3f} ± {d[1]:.3f} nats/token")
    summary["nll_nats_per_token"] = nll
    summary["provenance"]["load_end"] = load_average()
    line = json.dumps(summary)
    print(line)
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(line + "\n")
    return summary


if __name__ == "__main__":
    main()
