"""Where a from-scratch Qwen3-VL stops reading its picture (issue 37's CPU demonstration).

The image default's warm-up never names the observation's lead object (the carried one,
else the one the human closes in on) above chance. This probe trains the same tiny model
(the text default's decoder, no q/k norm, a 1024-token BPE; the 2-block vision tower; Figure
7's image prompt; 32 px per cell, one LLM token per cell) *supervised* on one short target
per picture, with the pictures made progressively more like the real render:

  solid   the whole picture is the lead's colour            (is the image path wired?)
  needle  a white picture, the human's cell in that colour  (can it find one cell?)
  marked  the real render, the human's cell in that colour  (among the real distractors?)
  lead    the real render                                   (the warm-up's actual question)
  caption the real render; target: all eight objects in reading order (where things are)
  cells_lead, cells_caption   lead and caption on the flat-cell render (`style="cells"`)
  cells_partner     the cells render; target: the lead's likeliest partner by the path
                    (`approach_order`'s second object: label-free, what a warm-up teacher
                    could teach); only pictures with a carried lead have evidence for it
  recency_partner   the same target on the cells render with the path shaded by recency
                    (light: long ago, dark: just now), so the picture shows its direction

and scores greedy answers on held-out (episode, t) pictures (`--pictures`, 160; 48 before
2026-12-06's stop 59): the share that equal the target, on all pictures and on those whose
lead is carried, and the share whose first item is right, beside what one fixed answer (the
commonest target) scores: leads cluster by episode, so that bar is far above 1/8.

    python benchmarks/vl_reading.py --kinds solid,needle,marked,lead,caption --steps 300
    python benchmarks/vl_reading.py --kinds cells_lead --observation image_short
    python benchmarks/vl_reading.py --kinds cells_partner,recency_partner \
        --observation image_short
    python benchmarks/vl_reading.py --kinds cells_lead --observation image_short --patch 32

Prints one line per evaluation and ends with one JSON line of the final figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from jaxtom.mindzero import goals_text
from jaxtom.mindzero import vl_train
from jaxtom.mindzero.data import task_records, timestep_records
from jaxtom.mindzero.driver import make_mesh
from jaxtom.mindzero.experiments import TINY_MODEL
from jaxtom.mindzero.experiments_vl import tiny_vl_config
from jaxtom.mindzero.observation import observation_image
from jaxtom.mindzero.observation import HostEpisodes, approach_order
from jaxtom.mindzero.warmup import teacher_rollout, warmup_step_config, warmup_trainer_config
from jaxtom.gridworld.render import TRACE_FILL
from jaxtom.rl.trainer import Trainer
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

KINDS = ("solid", "needle", "marked", "lead", "caption", "cells_lead", "cells_caption",
         "cells_partner", "recency_partner")
# one distinct colour per object label (sorted label order), for the synthetic pictures
PALETTE = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230]], np.uint8)


def probe_config(steps: int, lr: float, seed: int, workdir: str, observation: str = "image",
                 cell: int = 32):
    cfg = tiny_vl_config()
    mz = cfg.mindzero
    return dataclasses.replace(
        cfg, model=dataclasses.replace(TINY_MODEL, qk_norm=False, vocab_size=1024),
        trainer=dataclasses.replace(cfg.trainer, seed=seed, workdir=workdir, max_new_tokens=48),
        mindzero=dataclasses.replace(
            # the full runs' episode counts (benchmarks/README.md); the smoke config's 40 / 8
            # gave a held-out set of eight episodes, too few to rank anything
            mz, data=dataclasses.replace(mz.data, image_cell_size=cell, observation=observation,
                                         train_episodes=200, eval_episodes=40),
            warmup=dataclasses.replace(mz.warmup, steps=steps, batch_size=32,
                                       learning_rate=lr)))


def target(kind: str, view: HostEpisodes, e: int, t: int) -> str:
    if kind.endswith("partner"):  # the lead's likeliest partner by the path (label-free)
        return view.labels[e][approach_order(view, e, t)[1]]
    if kind.endswith("caption"):  # every object, row-major by its cell
        order = np.argsort(view.obj_cell[e, t], kind="stable")
        return ", ".join(view.labels[e][k] for k in order)
    return view.labels[e][approach_order(view, e, t)[0]]


def picture(kind: str, labels: list[str]):
    """(view, e, t, cell, style) -> uint8 picture for `kind` (the real render for lead and
    caption, the flat cells for cells_*); the kind decides the style, the config's is ignored."""
    if kind in ("lead", "caption"):
        return lambda view, e, t, cell, style=None: observation_image(view, e, t, cell)
    if kind.startswith("cells"):
        return lambda view, e, t, cell, style=None: observation_image(view, e, t, cell, "cells")
    if kind == "recency_partner":
        return recency_picture

    def render(view, e, t, cell, style=None):
        real = observation_image(view, e, t, cell)
        colour = PALETTE[labels.index(target("lead", view, e, t))]
        if kind == "solid":
            return np.broadcast_to(colour, real.shape).copy()
        out = real.copy() if kind == "marked" else np.full_like(real, 255)
        x, y = int(view.human_cell[e, t]) % 10, int(view.human_cell[e, t]) // 10
        out[y * cell:(y + 1) * cell, x * cell:(x + 1) * cell] = colour
        return out
    return render


OLDEST, NEWEST = np.array([225, 245, 225]), np.array([0, 110, 0])


def recency_picture(view, e, t, cell, style=None):
    """The cells render with each path cell's inside shaded by when the human last stood
    there (light: long ago, dark: just now), so the picture shows which way the path runs;
    objects (a carried one too), walls and borders are left as drawn."""
    drawn = observation_image(view, e, t, cell, "cells")
    out = drawn.copy()
    height, width = out.shape[0] // cell, out.shape[1] // cell
    cells = np.asarray(view.human_cell[e])[: t + 1]
    inset = cell // 4
    for i, c in enumerate(cells):  # in visit order: a cell's last visit shades it
        x, y = int(c) % width, int(c) // width
        top, left = (height - 1 - y) * cell, x * cell
        if np.array_equal(drawn[top + cell // 2, left + cell // 2], TRACE_FILL):
            shade = OLDEST + (NEWEST - OLDEST) * (i + 1) / len(cells)
            out[top + inset:top + cell - inset, left + inset:left + cell - inset] = shade
    return out


def run(kind: str, steps: int, lr: float, seed: int, evals: int,
        observation: str = "image", pictures: int = 160, cell: int = 32) -> dict:
    workdir = tempfile.mkdtemp(prefix=f"vl_reading_{kind}_")
    cfg = probe_config(steps, lr, seed, workdir, observation, cell)
    train_eps, test_eps = goals_text.make_episodes(cfg)
    view, test_view = HostEpisodes.from_episodes(train_eps), HostEpisodes.from_episodes(test_eps)
    labels = sorted({name for row in view.labels + test_view.labels for name in row})
    vl_train.observation_image = picture(kind, labels)  # what VLPrompts renders
    model, codec = vl_train.build_vl_model(cfg, Path(workdir), views=(view, test_view))
    prompts = vl_train.VLPrompts(cfg, codec, view, model.config)
    held_out = vl_train.VLPrompts(cfg, codec, test_view, model.config)
    row_len = vl_train.vl_row_len(cfg, prompts, view, 40)

    def rollout(model, tasks, key, step):
        r = teacher_rollout(tasks, step, seed, codec, prompts,
                            lambda e, t, rng: target(kind, view, e, t))
        return vl_train.global_vl_batch(r, vl_train.image_keys(tasks), prompts, model.config,
                                        row_len=row_len, pad_id=codec.pad_id)

    records = timestep_records(test_view, 1)
    rng = np.random.default_rng(123)
    pick = [records[i] for i in rng.choice(len(records), pictures, replace=False)]
    wants = [target(kind, test_view, e, t) for e, t in pick]
    carried = np.array([int(test_view.holding[e, t]) >= 0 for e, t in pick])
    # what one fixed answer scores: leads cluster by episode, so a model that names no
    # colour from the picture can still score this much (48 pictures: 0.375 on seed 0)
    majority = max(wants.count(w) for w in set(wants)) / len(wants)
    print(f"{kind}: {len(pick)} held-out pictures, the commonest target {majority:.3f}, "
          f"carried lead {carried.mean():.3f}", flush=True)
    started = time.time()

    def score(step, m) -> dict:
        seqs = vl_train.generate_vl_rows(
            m, [held_out(e, t) for e, t in pick], pick, np.arange(len(pick)),
            render=held_out.image, key=jax.random.key(0), num_patches=held_out.num_patches,
            max_new_tokens=48, temperature=0.0, stop=list(codec.eos_ids), pad_id=codec.pad_id)
        texts = [codec.decode(s).strip() for s in seqs]
        right = np.array([a == b for a, b in zip(texts, wants)])
        first = np.mean([a.split(",")[0].strip() == b.split(",")[0] for a, b in zip(texts, wants)])
        exact, held = float(right.mean()), float(right[carried].mean()) if carried.any() else 0.0
        out = {"exact": exact, "first": float(first), "distinct": float(len(set(texts))),
               "exact_carried": held, "majority": majority}
        print(f"{kind} step {step}: exact {exact:.3f} (carried lead {held:.3f}; one fixed answer "
              f"{majority:.3f}), first item {first:.3f}, {len(set(texts))} distinct answers "
              f"({time.time() - started:.0f} s)", flush=True)
        return out

    wcfg = dataclasses.replace(warmup_trainer_config(cfg), eval_every=max(steps // evals, 1))
    trainer = Trainer(model, task_records(view, 1), rollout, warmup_step_config(cfg), wcfg,
                      mesh=make_mesh(cfg), eval_hooks=[score], desc=kind)
    final = score(steps, trainer.learner.model(trainer.run()))
    return {**final, "seconds": round(time.time() - started, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evals", type=int, default=4, help="evaluations during training")
    ap.add_argument("--pictures", type=int, default=160, help="held-out pictures scored")
    ap.add_argument("--observation", default="image", choices=("image", "image_short"),
                    help="the prompt's text: Figure 7's, or the picture and one line")
    ap.add_argument("--patch", type=int, default=16,
                    help="the tiny tower's patch size; 32 merges nothing (one patch per token)")
    ap.add_argument("--cell", type=int, default=32,
                    help="px per grid cell (32: one LLM token per cell; 16: one patch per cell)")
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_args()
    record = Run("vl_reading")
    kinds = args.kinds.split(",")
    if args.patch != 16:  # one patch per LLM token: no 2x2 merge
        vl_train.TINY_VISION = dict(vl_train.TINY_VISION, patch_size=args.patch,
                                    spatial_merge_size=1)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"unknown kinds {unknown}; expected some of {KINDS}")
    figures = {k: run(k, args.steps, args.lr, args.seed, args.evals, args.observation,
                      args.pictures, args.cell) for k in kinds}
    record.emit({"steps": args.steps, "lr": args.lr, "seed": args.seed, "cell": args.cell,
                      "patch": args.patch,
                      "observation": args.observation, **figures}, save=args.save)


if __name__ == "__main__":
    main()
