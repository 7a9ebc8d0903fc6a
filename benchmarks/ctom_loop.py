"""What CToM's hidden loop does on the packing default (issue 35): where its score comes from.

For a trained `configs/ctom_tiny.py` run it replays `jaxtom eval`'s held-out conversations (the
same tasks, conversations per task and sampling key, so the scores equal the eval table's)
with the trained model and with its warm-up, and dissects them:

  * per round and slot, how often the first draft and the shown list hold the needed item
    (CToM), or the shown list alone (direct mode: Naive GRPO / Prompting Base);
  * every prediction of a reply to a draft, by what it says: an acceptance (right only when
    the draft needs nothing), or a need naming items: for each item, whether it is right for
    its slot, is the one the cue before it calls for, whether that cue is one of the task's,
    whether the draft got that slot wrong (the revision can gain) or right (it can only keep
    or lose it); whether the prediction names every need the draft misses, and whether it is
    the reply the user would give (`packing.user_reply`);
  * revisions: how often the next draft takes in every predicted item, and the slots gained.

    python benchmarks/ctom_loop.py RUN_DIR [--mode ctom|direct] [OVERRIDES ...]

OVERRIDES are the run's own (at least trainer.seed=S when not 0). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re

import jax
import numpy as np

from jaxtom.ctom import lockstep
from jaxtom.ctom import packing as PK
from jaxtom.ctom.controller import run_conversations
from jaxtom.ctom.evaluate import method_name, models_to_evaluate
from jaxtom.ctom.train import load_ctom_config, make_simulator, policy_and_tokenizer, sampler_policy
from jaxtom.ctom.task_sets import evaluation_tasks
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run


def slots_right(text: str | None, task) -> np.ndarray:
    """[4] bool: which slots' first listed item is the needed one (`packing.score`'s rule)."""
    need = dict(zip(PK.SLOT_NAMES, PK.required(task)))
    got: dict[str, str] = {}
    for item in PK.items_in(text):
        got.setdefault(PK.ITEM_SLOT[item], item)
    return np.array([got.get(s) == need[s] for s in PK.SLOT_NAMES])


def prediction_kinds(draft: str, prediction: str, task) -> list[str]:
    """The counters one prediction of the reply to `draft` adds to: per prediction, what it
    is; per item it names (a need names several), what that item does for the draft."""
    right = slots_right(draft, task)
    truth = PK.user_reply(task, draft)
    out = ["predictions", "is the user's reply"] if prediction.strip() == truth else [
        "predictions"]
    named = PK.items_in(prediction)
    if not named:
        if prediction.strip() == PK.ACCEPT:
            out.append("acceptance, draft right" if right.all() else "acceptance, draft wrong")
        else:
            out.append("no item")
        return out
    out.append("names items")
    fixes = set()
    task_cues = set(PK.cues_in(task.prompt).values())
    words = re.findall(r"[a-z]+", prediction.lower())  # packing.items_in's reading
    for item in named:
        slot = PK.SLOT_NAMES.index(PK.ITEM_SLOT[item])
        at = words.index(item)
        cue = words[at - 1] if at and words[at - 1] in PK.CUE_SLOT else None
        out.append("named items")
        good = item == PK.required(task)[slot]
        if good:
            out.append("item right for its slot")
        if cue in task_cues:
            out.append("cue is the task's")
        if cue is not None and PK.CUE_ITEM.get(cue) == item:
            out.append("item is its cue's")
        out.append("slot already right" if right[slot] else "slot wrong in the draft")
        if good and not right[slot]:
            out.append("useful: fixes a wrong slot")
            fixes.add(slot)
    if fixes == set(np.flatnonzero(~right)):
        out.append("names every need the draft misses")
    return out


def dissect(convs, mode: str) -> dict:
    rounds = max(len(c.rounds) for c in convs)
    first = np.zeros((rounds, 4))
    shown = np.zeros((rounds, 4))
    n = np.zeros(rounds)
    counts: collections.Counter = collections.Counter()
    for c in convs:
        for t, r in enumerate(c.rounds):
            n[t] += 1
            shown[t] += slots_right(r.shown, c.task)
            if mode != "ctom" or not r.drafts:
                continue
            first[t] += slots_right(r.drafts[0], c.task)
            counts[f"round {t} drafts {len(r.drafts)}"] += 1
            for k, (draft, pred) in enumerate(zip(r.drafts, r.predictions)):
                counts.update(prediction_kinds(draft, pred, c.task))
                if k + 1 < len(r.drafts):
                    named = PK.items_in(pred)
                    counts["revisions"] += 1
                    if named:
                        counts["revisions after named items"] += 1
                        counts["revision takes every item in"] += set(named) <= set(
                            PK.items_in(r.drafts[k + 1]))
                    counts["slots gained by revisions"] += int(
                        slots_right(r.drafts[k + 1], c.task).sum()
                        - slots_right(draft, c.task).sum())
    safe = np.maximum(n, 1)[:, None]
    out = {"score": float(np.mean([c.score for c in convs])), "rounds": n.tolist(),
           "shown_slot_accuracy": (shown / safe).round(3).tolist(),
           "counts": dict(sorted(counts.items()))}
    if mode == "ctom":
        out["first_draft_slot_accuracy"] = (first / safe).round(3).tolist()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--mode", choices=("ctom", "direct"), default="ctom")
    ap.add_argument("--config", default="configs/ctom_tiny.py")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_intermixed_args()
    record = Run("ctom_loop")
    overrides = [f"trainer.workdir={args.run_dir}", f"ctom.controller.mode={args.mode}",
                 *args.overrides]
    config, s = load_ctom_config(args.config, overrides)
    if s.domain != "packing":
        raise SystemExit(f"ctom_loop dissects the packing domain; {args.config} is {s.domain!r}")
    start, tok = policy_and_tokenizer(config)
    tasks = evaluation_tasks(s, config.trainer.seed)
    cfg = dataclasses.replace(s.controller_config(),
                              mode=args.mode)
    report = {"run": args.run_dir, "mode": args.mode, "seed": config.trainer.seed, "models": {}}
    for trained, source, model in models_to_evaluate(config, tok, start, tasks):
        policy = sampler_policy(model, tok, s, temperature=config.trainer.temperature)
        # exactly `jaxtom eval`'s conversations (evaluate.evaluate_model)
        convs = run_conversations([t for t in tasks for _ in range(s.eval_conversations)],
                                  policy, lockstep.shared_simulator(make_simulator(s)), tok,
                                  cfg, key=jax.random.key(config.trainer.seed + 1),
                                  host_map=lockstep.shared_map)
        name = method_name(config, cfg, trained)
        d = report["models"][name] = {"source": source, **dissect(convs, args.mode)}
        print(f"== {name} ({source}): score {100 * d['score']:.2f}")
        for t, acc in enumerate(d["shown_slot_accuracy"]):
            line = f"  round {t}: shown list, per slot {acc}"
            if args.mode == "ctom":
                line += f"; first draft {d['first_draft_slot_accuracy'][t]}"
            print(line)
        for k, v in d["counts"].items():
            print(f"  {k}: {v}")
    record.emit(report, save=args.save)


if __name__ == "__main__":
    main()
