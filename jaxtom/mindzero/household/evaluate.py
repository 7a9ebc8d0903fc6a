"""Household goal inference on held-out apartments (Table 1b / 4b's columns), `jaxtom eval`.

Every method answers the same held-out (episode, t) queries (test apartments 3 and 6, every
`eval.stride`-th step after the first key action): the trained model (greedy, or sampled at
`eval.temperature`), the warm-up-only model, a random goal (O-WAH's `get_random_goal`, one per
episode, as the random helper uses), the teacher's observed goal (the label-free heuristic the
warm-up imitates), and the exact symbolic posterior over the generator's goal space
(`data.goal_support`: ~660 goals; the planner's exact likelihood times the generator's
shape, tasks uniform and goals uniform within a task) and its top-n.

Scores per query, against the true goal and the exact posterior: log score of the true goal
`log((1 - mix) q(true) + mix / |H|)` (mix = `eval.score_mix`, 1%: particles are sparse; mass a
method puts outside H is lost), top-1 (the true goal is the most probable particle; ties share
the credit), KL(exact || smoothed q) over H, and TFLOPs per query (appendix A.2:
2 x active parameters x tokens). Means with episode-clustered SEs and the trained model's paired
margin over each method (`jaxtom.eval.metrics`). The assistance (speedup) and QA (accuracy)
columns of Tables 1b / 4b come from
`jaxtom.mindzero.household.evaluate_assist.evaluate_run_assistance` (with `eval.assistance`) and
`jaxtom.mindzero.household.qa_ssrl.evaluate_run_qa` (with `eval.qa_episodes > 0`), called with
the same models and held-out episodes.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxtom import flops, storage
from jaxtom.eval import metrics
from jaxtom.household.helper_beliefs import random_goal
from jaxtom.household.symbolic import SymbolicLikelihood
from jaxtom.mindzero.household import data as hd
from jaxtom.mindzero.household.evaluate_assist import evaluate_run_assistance
from jaxtom.mindzero.household.particles import parse_particles
from jaxtom.mindzero.household.qa_ssrl import evaluate_run_qa
from jaxtom.mindzero.household.scores import belief_scores, scores_from_mass, top1_share
from jaxtom.mindzero.household.train import load_model
from jaxtom.mindzero.policy import sample_completions

COLUMNS = (("log_score", "log score (true goal)"), ("top1", "top-1"),
           ("kl_exact", "KL(exact || q)"))


def exact_posteriors(episodes, rows, params) -> list[np.ndarray]:
    """Exact posterior over each row's goal space after a_0..a_{t-1}."""
    liks: dict[int, SymbolicLikelihood] = {}
    out = []
    for e, t in rows:
        if e not in liks:
            liks[e] = SymbolicLikelihood(episodes[e], params)
        support = hd.goal_support(episodes[e].apartment)
        out.append(liks[e].posterior(support, t - 1, hd.support_log_prior(support)))
    return out


class _Belief:
    """A (goals, probs) belief in the shape of a parse result."""
    ok = True

    def __init__(self, goals, probs):
        self.goals, self.probs = tuple(goals), np.asarray(probs, float)


def baseline_beliefs(episodes, rows, exact, num_particles: int, seed: int) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    random_goals = [random_goal(rng) for _ in episodes]
    out = {"random goal": [], "observed goal (teacher heuristic)": [],
           f"exact posterior top-{num_particles}": []}
    trng = np.random.default_rng(seed + 1)
    for (e, t), post in zip(rows, exact):
        out["random goal"].append(_Belief([random_goals[e]], [1.0]))
        g = hd.observed_goal(hd.evidence(episodes[e], t), trng)
        out["observed goal (teacher heuristic)"].append(_Belief([g], [1.0]))
        support = hd.goal_support(episodes[e].apartment)
        top = np.argsort(-post)[:num_particles]
        out[f"exact posterior top-{num_particles}"].append(
            _Belief([support[i] for i in top], post[top] / post[top].sum()))
    return out


def model_beliefs(model, codec, episodes, rows, *, observation: str, num_particles: int,
                  max_new_tokens: int, temperature: float, seed: int, chunk: int = 128):
    """(parse results, completions, tokens per query) of a model on every row."""
    render = hd.get_observation(observation)
    parsed, texts, tokens = [], [], []
    for lo in range(0, len(rows), chunk):
        part = rows[lo:lo + chunk]
        prompts = [codec.prompt_ids(render(episodes[e], t, num_particles)) for e, t in part]
        out, _, n_tok = sample_completions(model, codec, prompts,
                                           key=jax.random.fold_in(jax.random.key(seed), lo),
                                           temperature=temperature,
                                           max_new_tokens=max_new_tokens)
        texts += out
        tokens += list(n_tok)
        parsed += [parse_particles(x, mode="eval", num_particles=num_particles) for x in out]
    return parsed, texts, np.asarray(tokens, float)


def evaluate_run(cfg, checkpoint, *, test=None, train=None, progress: bool = True) -> dict:
    """The goal-inference table of the household run at `checkpoint` (results next to it;
    `test`: its held-out episodes, regenerated when not given; `train` is not read)."""
    t0 = time.perf_counter()
    checkpoint = storage.path(checkpoint)
    run_dir = checkpoint.parent
    d, e_cfg = cfg.mindzero.data, cfg.mindzero.eval
    if test is None:
        test = hd.make_episodes(cfg, "test")
    test = list(test)[:e_cfg.episodes]
    rows = hd.timestep_records(test, e_cfg.stride, cfg.mindzero.household.after_first_key_action)
    episodes_of = [test[e] for e, _ in rows]
    exact = exact_posteriors(test, rows, hd.human_params(cfg))
    models = {"MindZero (trained)": load_model(cfg, checkpoint)}
    if (run_dir / "warmup").exists():
        models["warm-up only"] = load_model(cfg, run_dir / "warmup")
    per_row, extra = {}, {}
    for name, (model, codec) in models.items():
        parsed, texts, tokens = model_beliefs(
            model, codec, test, rows, observation=d.observation, num_particles=d.num_particles,
            max_new_tokens=cfg.trainer.max_new_tokens, temperature=e_cfg.temperature,
            seed=cfg.trainer.seed)
        per_row[name] = belief_scores(parsed, episodes_of, e_cfg.score_mix, exact)
        extra[name] = {"tflops_per_query": flops.inference_tflops(
            flops.active_params(model), float(tokens.mean())),
            "tokens_per_query": float(tokens.mean()),
            "well_formed": float(np.mean([p.ok for p in parsed])),
            "distinct_completions": len(set(texts))}
    for name, beliefs in baseline_beliefs(test, rows, exact, d.num_particles,
                                          cfg.trainer.seed).items():
        per_row[name] = belief_scores(beliefs, episodes_of, e_cfg.score_mix, exact)
    exact_rows = [scores_from_mass(p, top1_share(list(hd.goal_support(ep.apartment)), p, ep.goal),
                                   ep, e_cfg.score_mix, p) for p, ep in zip(exact, episodes_of)]
    per_row["exact posterior"] = {k: np.array([r[k] for r in exact_rows]) for k in exact_rows[0]}
    clusters = np.array([e for e, _ in rows])
    table = {}
    ref = "MindZero (trained)"
    for name, s in per_row.items():
        entry = dict(extra.get(name, {}))
        for k, v in s.items():
            entry[k], entry[k + "_se"] = metrics.cluster_mean_sem(v, clusters)
            entry[k + "_query_se"] = metrics.mean_sem(v)[1]
            if name != ref:
                entry[k + "_margin"], entry[k + "_margin_se"] = metrics.paired_difference(
                    per_row[ref][k], v, clusters)
                entry[k + "_margin_query_se"] = metrics.mean_sem(per_row[ref][k] - v)[1]
        table[name] = entry
    results = {"goal_inference": table, "episodes": len(test), "queries": len(rows),
               "per_query": {"rows": [list(r) for r in rows],
                             **{name: {k: v.tolist() for k, v in s.items()}
                                for name, s in per_row.items()}},
               "goal_space": int(np.mean([len(hd.goal_support(ep.apartment)) for ep in test]))}
    # Table 1b and Table 4b: each {} when its eval switch is off (eval.assistance / qa_episodes)
    results.update(evaluate_run_assistance(cfg, models, test))
    results.update(evaluate_run_qa(cfg, models, test))
    results["eval_s"] = time.perf_counter() - t0
    if jax.process_index() == 0:
        storage.write_json(run_dir / "results.json", results, indent=1, default=float)
        storage.write_text(run_dir / "results.md", markdown(results) + "\n")
    print(markdown(results))
    return results


def markdown(results: dict) -> str:
    table = results["goal_inference"]
    lines = [f"Household goal inference on held-out apartments: {results['episodes']} episodes, "
             f"{results['queries']} queries after the first key action (mean ± "
             "episode-clustered SE; log score and KL use q mixed with 1% uniform over the "
             f"generator's ~{results['goal_space']} goals).", "",
             "| method | " + " | ".join(c for _, c in COLUMNS) + " | TFLOPs/query |",
             "|---|" + "---|" * (len(COLUMNS) + 1)]
    for name, e in table.items():
        tf = e.get("tflops_per_query")
        cells = [f"{e[k]:.3f} ± {e[k + '_se']:.3f}" if k in e else "–" for k, _ in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " | "
                     + (f"{tf:.2e} |" if tf is not None else "N/A |"))
    ref = "MindZero (trained)"
    lines += ["", f"Margin of {ref} over each method (paired difference ± SE over episodes; "
              "[± SE over queries]):", "",
              "| vs | log score | top-1 |", "|---|---|---|"]
    for name, e in table.items():
        if "log_score_margin" in e:
            lines.append(f"| {name} | {e['log_score_margin']:+.3f} ± "
                         f"{e['log_score_margin_se']:.3f} [± "
                         f"{e.get('log_score_margin_query_se', float('nan')):.3f}] | "
                         f"{e['top1_margin']:+.3f} ± {e['top1_margin_se']:.3f} [± "
                         f"{e.get('top1_margin_query_se', float('nan')):.3f}] |")
    for name, e in table.items():
        if "well_formed" in e:
            lines.append(f"\n{name}: {e['well_formed']:.2f} well formed, "
                         f"{e['distinct_completions']} distinct completions, "
                         f"{e['tokens_per_query']:.0f} tokens/query")
    for key in ("assistance_markdown", "qa_markdown"):
        if key in results:
            lines += ["", results[key]]
    return "\n".join(lines)


__all__ = ["evaluate_run", "exact_posteriors", "markdown", "model_beliefs"]
