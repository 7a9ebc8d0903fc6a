"""Household model-free baselines: Table 1b's speedups and Table 4b's QA accuracies.

(a) Assistance: over `--seeds` seeds, 16 test-apartment episodes each (apartments 3, 6; the
    paper's test set size), 3 runs per episode: oracle (true goal), exact posterior, SMC with
    the symbolic likelihood, random goal; speedup over the person alone (mean ± SE over
    episodes per seed) and paired margins. `--observation full` gives the person the
    whole apartment (O-WAH's evaluation); the default is the paper's partial view.
(b) QA: questions from `--qa-episodes` test-apartment episodes per seed; accuracy per type of
    the planner's own belief, the label-free reward's choice and a random answerer.
The last line is one JSON object with every figure.

    python benchmarks/household_helpers.py [--seeds 0 1 2] [--observation full|partial]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from jaxtom.mindzero.household import assist
from jaxtom.mindzero.household import qa
from jaxtom.household.apartments import TEST_APARTMENTS, apartments
from jaxtom.household.episodes import generate_episodes
from jaxtom.mindzero.household.evaluate_assist import evaluate_helpers, markdown, paired_margin
from jaxtom.household.human import HumanParams
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--observation", choices=("full", "partial"), default="partial")
    ap.add_argument("--qa-episodes", type=int, default=48)
    ap.add_argument("--skip-assist", action="store_true")
    ap.add_argument("--skip-qa", action="store_true")
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_args()
    record = Run("household_helpers")
    out = {"assist": {}, "qa": {}, "observation": args.observation}
    cfg = assist.AssistConfig(human=HumanParams(full_observation=args.observation == "full"))
    for seed in args.seeds:
        if not args.skip_assist:
            t0 = time.perf_counter()
            tasks = [e.task for e in generate_episodes(apartments(TEST_APARTMENTS),
                                                       args.episodes, seed=seed)]
            rows = evaluate_helpers(tasks, seed=seed, cfg=cfg, progress=True)
            print(f"seed {seed} ({time.perf_counter() - t0:.0f} s)")
            print(markdown(rows))
            by = {r["method"]: r for r in rows}
            margins = {f"{a} - {b}": paired_margin(by[a], by[b]) for a, b in (
                ("oracle (true goal)", "SMC (symbolic likelihood)"),
                ("exact posterior", "random goal"), ("SMC (symbolic likelihood)", "random goal"),
                ("oracle (true goal)", "exact posterior"))}
            for k, (m, se) in margins.items():
                print(f"  paired {k}: {m:.1f} ± {se:.1f} %")
            out["assist"][seed] = {"rows": [{k: v for k, v in r.items() if k != "per_episode"}
                                            for r in rows], "margins": margins}
        if not args.skip_qa:
            episodes = generate_episodes(apartments(TEST_APARTMENTS), args.qa_episodes,
                                         seed=1000 + seed)
            qs = qa.make_questions(episodes, seed=seed, per_type=2)
            tables = qa.baseline_tables(episodes, qs, seed=seed)
            print(qa.markdown(tables, f"QA, seed {seed}: {len(episodes)} test-apartment episodes, "
                                      f"{len(qs)} questions"))
            out["qa"][seed] = tables
    summary = {}
    if out["assist"]:
        for method in [r["method"] for r in next(iter(out["assist"].values()))["rows"]]:
            vals = [next(r["speedup"] for r in v["rows"] if r["method"] == method)
                    for v in out["assist"].values()]
            summary[method] = (float(np.mean(vals)), [round(v, 1) for v in vals])
        print("speedup (%) mean over seeds [per seed]:", summary)
    out["summary"] = summary
    record.emit(out, save=args.save)


if __name__ == "__main__":
    main()
