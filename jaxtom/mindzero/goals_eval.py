"""Evaluate a trained MindZero run and write the results table (Markdown + JSON) and plots.

Methods, all in one harness on the same held-out (episode, t): MindZero (the checkpoint), the
untrained model (the warm-up-only checkpoint when the run had a warm-up), a random goal, the
exact Bayesian posterior (full, and its top-N as particles), and a uniform guess. Assistance
speedups (human randomness `eval.random_prob`, human seeds `eval.seeds`; 0.15 and 10/20/30
by default) for the models, with the gridworld's random, BIP and oracle helpers beside them.
TFLOPs per query follow appendix A.2 (counting the vision tower for image runs, which are
asked through `vl_eval.VLQueries` with the same harness). With `eval.qa_episodes > 0`, QA accuracy (appendix
B.2, question types 1-3) of the models and the exact-posterior / random baselines on
held-out QA episodes.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np

from jaxtom import storage
from jaxtom.config import Config
from jaxtom.eval import metrics
from jaxtom.gridworld import qa_episodes, simulate
from jaxtom.gridworld.episodes import layout_keys
from jaxtom.mindzero import evaluate as ev
from jaxtom.mindzero.assist import assist
from jaxtom.mindzero.config import MindZeroSection, is_image
from jaxtom.mindzero.observation import HostEpisodes
from jaxtom.mindzero.goals_text import env_params, episode_params, load_model, make_episodes
from jaxtom.mindzero.vl_eval import VLQueries, load_vl_model

COLUMNS = (("top1", "top-1 goal acc"), ("log_score", "log score (true goal)"),
           ("brier", "Brier"), ("kl_exact", "KL(exact || q)"))


QA_COLUMNS = (("type1", "type 1 (which pick)"), ("type2", "type 2 (which target)"),
              ("type3", "type 3 (target while carrying)"), ("overall", "overall"))
_QA_KEY = 0x51A  # folded into the run's seed: QA episodes are a draw of their own


def _fmt(entry, key):
    return f"{entry[key]:.3f} ± {entry[key + '_se']:.3f}"


def _from_dict(cls, data: dict):
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}")
    kwargs = {}
    for name, value in data.items():
        default = names[name].default
        if dataclasses.is_dataclass(default):
            value = _from_dict(type(default), value)
        elif isinstance(value, list):  # JSON has no tuples
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def load_run_config(run_dir: str | Path) -> Config:
    """The config a run was trained with, from RUN_DIR/config.json (fields missing there take
    their defaults; unknown ones are an error)."""
    path = storage.path(run_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"no config.json in {run_dir}: not a MindZero run directory")
    data = json.loads(path.read_text())
    if not isinstance(data.get("mindzero"), dict):
        raise ValueError(f"{path} holds no mindzero section: not a MindZero run")
    sections = {f.name: f for f in dataclasses.fields(Config)}
    unknown = set(data) - set(sections)
    if unknown:
        raise ValueError(f"unknown Config fields {sorted(unknown)} in {path}")
    kwargs = {"mindzero": _from_dict(MindZeroSection, data.pop("mindzero"))}
    data.pop("ctom", None)
    for name, value in data.items():
        kwargs[name] = _from_dict(type(sections[name].default), value)
    return Config(**kwargs)


def qa_test_set(cfg: Config, train=None):
    """`cfg.mindzero.eval.qa_episodes` held-out episodes that each carry questions of types 1-3, and the
    questions: drawn like the eval split of `make_episodes` (same label constraints, no
    training wall layout) from a key of their own. `train`: the run's training episodes
    (regenerated from the config when not given)."""
    if cfg.mindzero.eval.qa_episodes <= 0:
        raise ValueError("eval.qa_episodes must be > 0 for a QA set")
    if train is None:
        train, _ = make_episodes(cfg)
    params = episode_params(cfg, "test")
    key = jax.random.fold_in(jax.random.key(cfg.trainer.seed), _QA_KEY)
    return qa_episodes(key, params, cfg.mindzero.eval.qa_episodes, exclude_layouts=layout_keys(train),
                       seed=cfg.trainer.seed)


def run_queries(cfg: Config, checkpoint: str | Path):
    """How `jaxtom eval` asks the model saved at `checkpoint`: `evaluate.TextQueries`, or
    `vl_eval.VLQueries` for a run on image observations (Qwen3-VL reading pictures)."""
    d = cfg.mindzero.data
    if is_image(d.observation):
        model, codec = load_vl_model(cfg, checkpoint)
        return VLQueries(model, codec, d.image_cell_size, d.image_style, d.num_particles,
                         d.observation)
    model, codec = load_model(cfg, checkpoint)
    return ev.TextQueries(model, codec, d.observation, d.num_particles)


def evaluate_qa(cfg: Config, models: dict, qa=None) -> dict:
    """QA accuracy per question type and overall for `models` (name -> its queries, as
    `run_queries` makes them) and the baselines, on `qa` = (episodes, questions) or
    `qa_test_set(cfg)`."""
    episodes, questions = qa if qa is not None else qa_test_set(cfg)
    view = HostEpisodes.from_episodes(episodes)
    beliefs, index = ev.qa_beliefs(models, view, questions, env_params(cfg),
                                   num_particles=cfg.mindzero.data.num_particles,
                                   max_new_tokens=cfg.trainer.max_new_tokens, seed=cfg.trainer.seed,
                                   temperature=cfg.mindzero.eval.temperature)
    return {"episodes": len(view), "questions": len(questions),
            "accuracy": ev.qa_scores(beliefs, questions, index, seed=cfg.trainer.seed)}


def evaluate_run(cfg: Config, checkpoint: str | Path, *, test=None, qa=None, train=None,
                 progress: bool = True) -> dict:
    """Evaluate the run whose checkpoint is `checkpoint` (results next to it). `test`: the
    held-out episodes (regenerated from the config when not given); `qa`: (episodes,
    questions) for the QA table (default `qa_test_set(cfg, train)`; only with
    eval.qa_episodes > 0); `train`: the run's training episodes, whose layouts the QA set
    avoids (regenerated when not given)."""
    t0 = time.perf_counter()
    checkpoint = storage.path(checkpoint)
    run_dir = checkpoint.parent
    params = env_params(cfg)
    if test is None:
        _, test = make_episodes(cfg)
    test = test.take(np.arange(min(cfg.mindzero.eval.episodes, len(test))))
    view = HostEpisodes.from_episodes(test)
    rows = ev.steps_to_score(view, cfg.mindzero.eval.stride)
    n = cfg.mindzero.data.num_particles
    models = {"MindZero": run_queries(cfg, checkpoint)}
    if (run_dir / "warmup").exists():
        models["untrained (warm-up only)"] = run_queries(cfg, run_dir / "warmup")
    beliefs, tokens = {}, {}
    for name, queries in models.items():
        beliefs[name], tokens[name] = ev.model_beliefs(
            queries, view, rows, num_particles=n, max_new_tokens=cfg.trainer.max_new_tokens, temperature=cfg.mindzero.eval.temperature,
            seed=cfg.trainer.seed)
    refs = ev.reference_beliefs(view, rows, params, cfg.trainer.seed, n)
    if cfg.mindzero.data.observation.startswith("compact"):
        beliefs["listed order (heuristic)"] = ev.listed_order_beliefs(view, rows, n)
    beliefs.update({"random goal": refs["random"], "exact posterior": refs["exact"],
                    f"exact posterior top-{n}": refs[f"exact_top{n}"],
                    "uniform": refs["uniform"]})
    table, per_row = ev.score_methods(beliefs, view, rows, refs["exact"], cfg.mindzero.eval.score_mix,
                                      reference="MindZero")
    for name, queries in models.items():
        table[name]["tokens_per_query"] = float(tokens[name].mean())
        table[name]["tflops_per_query"] = queries.tflops_per_query(tokens[name].mean())
    curves = ev.progress_curves(per_row, view, rows)
    metrics.plot_accuracy_by_progress(
        {k: v for k, v in curves.items() if k != "uniform"}, run_dir / "goal_accuracy.png",
        "held-out episodes (no helper)")
    results = {"goal_inference": table, "episodes": len(view), "queries": len(rows)}
    if cfg.mindzero.eval.qa_episodes > 0:
        results["qa"] = evaluate_qa(cfg, models, qa if qa is not None
                                    else qa_test_set(cfg, train))
    if cfg.mindzero.eval.assistance:
        aparams = params.replace(random_prob=cfg.mindzero.eval.random_prob,
                                 teleport_after=cfg.mindzero.eval.teleport_after)
        n_assist = min(cfg.mindzero.eval.assist_episodes or len(view), len(view))
        assist_states = test.take(np.arange(n_assist)).states
        assist_tab = {}
        assist_curves = {}
        for name, queries in models.items():
            out = assist(queries, assist_states, aparams, seeds=cfg.mindzero.eval.seeds,
                         num_particles=n, max_new_tokens=cfg.trainer.max_new_tokens,
                         temperature=cfg.mindzero.eval.temperature)
            per_episode = out["speedup"].mean(0)  # over the human's seeds
            mean, se = metrics.mean_sem(per_episode)
            assist_tab[name] = {"speedup": mean, "speedup_se": se,
                                "per_episode": [float(x) for x in per_episode],
                                "tflops_per_query": queries.tflops_per_query(
                                    out["tokens"].mean()) if len(out["tokens"]) else 0.0}
            log = out["log"]
            if len(log):
                t_collab = out["t_collab"].reshape(-1)
                assist_curves[name] = metrics.accuracy_by_progress(
                    log[:, 1] / t_collab[log[:, 0].astype(int)], log[:, 2])
        if "untrained (warm-up only)" in assist_tab:  # same episodes and human seeds: paired
            diff = (np.asarray(assist_tab["MindZero"]["per_episode"])
                    - np.asarray(assist_tab["untrained (warm-up only)"]["per_episode"]))
            margin, margin_se = metrics.mean_sem(diff)
            assist_tab["MindZero"].update(margin_vs_warmup=margin, margin_vs_warmup_se=margin_se)
        sim = simulate(None, aparams, ("random", "bip", "oracle"), states=assist_states,
                       seeds=cfg.mindzero.eval.seeds, track_posterior=False)
        names = {"random": "random goal", "bip": "exact posterior (BIP)", "oracle": "oracle"}
        for h, label in names.items():
            assist_tab[label] = {"speedup": sim[h]["mean"], "speedup_se": sim[h]["sem"]}
        results["assistance"] = assist_tab
        results["assist_episodes"] = n_assist
        results["assist_human"] = {"random_prob": float(cfg.mindzero.eval.random_prob),
                                   "seeds": [int(x) for x in cfg.mindzero.eval.seeds]}
        if assist_curves:
            metrics.plot_accuracy_by_progress(assist_curves, run_dir / "assist_accuracy.png",
                                              "assistance, goal accuracy vs progress")
    results["eval_s"] = time.perf_counter() - t0
    write_results(results, run_dir, n)
    return results


def markdown(results: dict, n: int) -> str:
    lines = [(f"Held-out goal inference: {results['episodes']} episodes, "
              f"{results['queries']} queries (mean ± episode-clustered SE; log score and KL use "
              "q mixed with 1% uniform)."), "",
             "| method | " + " | ".join(c for _, c in COLUMNS) + " | TFLOPs/query |",
             "|---|" + "---|" * (len(COLUMNS) + 1)]
    for name, entry in results["goal_inference"].items():
        tf = entry.get("tflops_per_query")
        lines.append(f"| {name} | " + " | ".join(_fmt(entry, k) for k, _ in COLUMNS)
                     + f" | {tf:.2e} |" if tf is not None else
                     f"| {name} | " + " | ".join(_fmt(entry, k) for k, _ in COLUMNS) + " | – |")
    lines += ["", "Margin of MindZero over each method (paired per-episode difference ± SE):", "",
              "| vs | top-1 | log score |", "|---|---|---|"]
    for name, entry in results["goal_inference"].items():
        if "top1_margin" in entry:
            lines.append(f"| {name} | {entry['top1_margin']:+.3f} ± {entry['top1_margin_se']:.3f}"
                         f" | {entry['log_score_margin']:+.3f} ± "
                         f"{entry['log_score_margin_se']:.3f} |")
    if "qa" in results:
        lines += [""] + qa_markdown(results["qa"])
    if "assistance" in results:
        human = results.get("assist_human", {"random_prob": 0.15, "seeds": [10, 20, 30]})
        seeds = "/".join(str(x) for x in human["seeds"])
        lines += ["", f"Proactive assistance on {results.get('assist_episodes', results['episodes'])} "
                  f"episodes (human randomness {human['random_prob']:g}, seeds {seeds}):", "",
                  "| helper driven by | speedup | TFLOPs/query |", "|---|---|---|"]
        for name, entry in results["assistance"].items():
            tf = entry.get("tflops_per_query")
            lines.append(f"| {name} | {entry['speedup']:+.3f} ± {entry['speedup_se']:.3f} | "
                         + (f"{tf:.2e} |" if tf else "– |"))
        mz = results["assistance"].get("MindZero", {})
        if "margin_vs_warmup" in mz:
            lines += ["", f"Speedup margin of MindZero's helper over the warm-up-only model's "
                      f"(paired per episode): {mz['margin_vs_warmup']:+.3f} ± "
                      f"{mz['margin_vs_warmup_se']:.3f}"]
    return "\n".join(lines)


def qa_markdown(qa: dict) -> list[str]:
    """Lines of the QA accuracy table (as `evaluate_qa` returns it)."""
    lines = [(f"QA accuracy (binary choice, chance 0.5): {qa['episodes']} held-out episodes, "
              f"{qa['questions']} questions (mean ± SE, overall episode-clustered). Answers "
              "from the goal distribution at the question's step; when neither option has more "
              "mass (`decided` is the share that did) the answer is a coin flip. Questions are "
              "posed only where the exact posterior picks the truth, so it scores 1 by "
              "construction."), "",
             "| method | " + " | ".join(c for _, c in QA_COLUMNS) + " | decided |",
             "|---|" + "---|" * (len(QA_COLUMNS) + 1)]
    for name, entry in qa["accuracy"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(entry, k) for k, _ in QA_COLUMNS)
                     + f" | {entry['decided']:.2f} |")
    return lines


def write_results(results: dict, run_dir: Path, n: int) -> None:
    storage.write_json(storage.path(run_dir) / "results.json", results, indent=1,
                       default=float)
    text = markdown(results, n)
    storage.write_text(storage.path(run_dir) / "results.md", text + "\n")
    print(text)
