"""Household MindZero on the one trainer (`jaxtom.rl.trainer.Trainer`): format warm-up, then SSRL.

Same two phases as the gridworld (`jaxtom.mindzero.goals_text`), household parts plugged in:
the warm-up is a supervised rollout on the label-free teacher of `jaxtom.mindzero.household.data`
(advantage 1: exactly the NLL gradient); SSRL samples `group_size` Figure 9 particle
completions per (episode, t) prompt, parses them (`particles.parse_particles`, train rule:
exactly n distinct goals), and rewards them with the ELBO of `mindzero.household.reward`:

    R = sum_i q_i max(log P(a_0..a_{t-1} | g_i) + w_prior log P(g_i), log 1e-10) + w_H H(q)

Likelihood source (`mindzero.household.likelihood`):
  * `symbolic` (CPU default): the simulated human's exact log-likelihood of the observed
    actions (`symbolic.SymbolicLikelihood`, cached per episode and goal). It is a sum over up
    to ~100 steps, so it is reported relative to the best hypothesis of the prompt's group
    (a constant per prompt, so the group advantages are unchanged, while the 1e-10 floor
    only clips hypotheses 23 nats worse than the group's best rather than every hypothesis
    of a long episode);
  * `llm`: the paper's estimator (`llm_prompts`, the public "all-time" form: the initial
    state, the goal, the key actions so far -> A) likely / B) unlikely, P(A) / (P(A) + P(B))),
    scored by the policy's frozen starting model (`scorer=reference`) or an OpenAI-compatible
    server (`scorer=http`, the paper's larger reward model), through a cache.
Prior (`mindzero.household.prior`): `symbolic` rules (`symbolic.log_prior`), `llm`
(`llm_prompts.llm_log_prior`) or `none`. Malformed completions get the reward's format
penalty (log 1e-10 - 1, below every well-formed reward).

Each phase checkpoints under the run directory (`warmup_train/`, `ssrl/`); rerunning the
same command resumes. The final and warm-up parameters are saved on their own
(`checkpoint/`, `warmup/`) for `jaxtom eval`.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

from jaxtom import storage
from jaxtom.household import text
from jaxtom.household.symbolic import SymbolicLikelihood, log_prior
from jaxtom.mindzero import goals_text
from jaxtom.mindzero.household import data as hd
from jaxtom.mindzero.household import reward as hr
from jaxtom.mindzero.household.llm_prompts import (
    LikelihoodContext,
    LikelihoodQuery,
    llm_log_likelihood,
    llm_log_prior,
)
from jaxtom.mindzero.household.llm_scoring import CachedScorer, ModelScorer
from jaxtom.mindzero.household.llm_scoring_http import HTTPScorer
from jaxtom.mindzero.household.particles import parse_particles, to_arrays
from jaxtom.mindzero.household.scores import belief_scores
from jaxtom.mindzero.policy import Codec, sample_completions, train_bpe
from jaxtom.mindzero.task import Prepared
from jaxtom.mindzero.warmup import teacher_rollout
from jaxtom.models.orbax_io import restore_params
from jaxtom.rl import group_advantages
from jaxtom.rl.distributed import generate_rows
from jaxtom.rl.trainer import Rollout, compact_kwargs, completion_rows, sample_rows


# ---- model and tokenizer -------------------------------------------------------------------
def corpus(config, episode_sets, rng) -> list[str]:
    """Prompts and teacher completions (both teachers), to train the tiny model's BPE."""
    d = config.mindzero.data
    render = hd.get_observation(d.observation)
    texts = []
    for episodes in episode_sets:
        for e, t in hd.timestep_records(episodes, stride=2):
            texts.append(render(episodes[e], t, d.num_particles))
            for teacher in hd.TEACHERS:
                texts.append(hd.warmup_target(episodes[e], t, d.num_particles, rng, teacher))
    return texts


# The fixed parts of Figure 9 JSON (as `particles.format_particles` writes it), one token each
# for the tiny model, so 3 particles of 3 objects take ~60 tokens instead of ~125.
JSON_PIECES = ('{"particles":[{"task_name":"', '","objects":[{"type":"', '","count":',
               '},{"type":"', '}],"target":{"type":"', '"},"p":', '},{"task_name":"', '}]}')


def build_model(config, run_dir: Path, episode_sets=(), mesh=None):
    """(model, codec): the config's checkpoint, or the tiny decoder over a BPE trained on the
    run's prompts and teacher completions (RUN_DIR/tokenizer.json, written once), with every
    household word one token."""
    path = storage.path(run_dir) / "tokenizer.json"
    if not config.model.path and not path.exists():
        rng = np.random.default_rng(config.trainer.seed)
        tok = train_bpe(corpus(config, episode_sets, rng), config.model.vocab_size)
        words = list(hd.COMPACT_WORDS)
        tok.backend.add_tokens(list(JSON_PIECES) + words + [f" {w}" for w in words])
        if jax.process_index() == 0:
            storage.save_tokenizer(path, tok.backend)
    return goals_text.build_model(config, run_dir,
                          tokenizer_path=path if not config.model.path else None, mesh=mesh)


def load_model(config, checkpoint):
    """(model, codec) from a run's checkpoint directory (tiny: plus its tokenizer.json)."""
    checkpoint = storage.absolute(checkpoint)
    model, codec = build_model(config, checkpoint.parent)
    return restore_params(model, checkpoint), codec


class Prompts:
    """Renders and encodes (episode, t) prompts, cached (revisited every epoch)."""

    def __init__(self, config, codec: Codec, episodes):
        self.render = hd.get_observation(config.mindzero.data.observation)
        self.n, self.codec, self.episodes = config.mindzero.data.num_particles, codec, episodes
        self.cache: dict[tuple[int, int], list[int]] = {}

    def __call__(self, e: int, t: int) -> list[int]:
        if (e, t) not in self.cache:
            self.cache[(e, t)] = self.codec.prompt_ids(self.render(self.episodes[e], t, self.n))
        return self.cache[(e, t)]


def row_len(config, prompts: Prompts, records, completion: int, quantum: int = 16) -> int:
    """One packed row length for the run (longest prompt + completion budget)."""
    longest = max(len(prompts(e, t)) for e, t in records)
    return int(np.ceil((longest + completion + 1) / quantum) * quantum)


def teacher_budget(config, codec: Codec, episodes, samples: int = 256) -> int:
    """A bound on the warm-up's target length (longest sampled target plus a quarter)."""
    d, w = config.mindzero.data, config.mindzero.warmup
    rng = np.random.default_rng(config.trainer.seed)
    records = hd.timestep_records(episodes)
    pick = rng.choice(len(records), min(samples, len(records)), replace=False)
    longest = max(len(codec.completion_ids(hd.warmup_target(
        episodes[e], t, d.num_particles, rng, w.teacher))) for e, t in (records[i] for i in pick))
    return longest + longest // 4 + 1


# ---- reward terms --------------------------------------------------------------------------
def option_scorer(config, model=None, codec: Codec | None = None):
    """The LLM estimators' scorer (cached): an HTTP server, or `model` (the policy's frozen
    starting weights) through its tokenizer."""
    h = config.mindzero.household
    if h.scorer == "http":
        if not h.url():
            raise ValueError("mindzero.household.scorer='http' needs mindzero.household."
                             "scorer_url or $JAXTOM_REWARD_URL")
        inner = HTTPScorer(base_url=h.url(), model=h.scorer_model, mode=h.scorer_mode,
                           timeout_s=h.scorer_timeout_s)
    else:
        if model is None or codec is None:
            raise ValueError("the reference scorer needs the policy's model and codec")
        inner = ModelScorer(model, codec.tokenizer, chat=codec.chat,
                            rows_per_call=h.scorer_batch)
    return CachedScorer(inner)


class RewardTerms:
    """Per-hypothesis log-likelihoods and log-priors of a batch of parsed samples."""

    def __init__(self, config, episodes, scorer=None, chat: bool = True):
        self.config, self.episodes, self.scorer = config, episodes, scorer
        h = config.mindzero.household
        self.likelihood, self.prior = h.likelihood, h.prior
        if scorer is None and "llm" in (self.likelihood, self.prior):
            raise ValueError("an llm likelihood or prior needs an option scorer")
        self.prefix = "" if chat else " "
        self.params = hd.human_params(config)
        self._symbolic: dict[int, object] = {}

    def symbolic(self, e: int):
        if e not in self._symbolic:
            self._symbolic[e] = SymbolicLikelihood(self.episodes[e], self.params)
        return self._symbolic[e]

    def __call__(self, episode, t, goals, groups, width: int):
        """(log_lik [B, N], log_prior [B, N] or None) for samples b = (episode[b], t[b]) with
        hypotheses goals[b]; `groups[b]` names b's GRPO group (symbolic relative reference)."""
        B = len(goals)
        ll = np.zeros((B, width))
        lp = None if self.prior == "none" else np.zeros((B, width))
        flat = [(b, i, g) for b, gs in enumerate(goals) for i, g in enumerate(gs)]
        if not flat:
            return ll, lp
        if self.likelihood == "symbolic":
            for b, i, g in flat:
                ll[b, i] = self.symbolic(int(episode[b])).log_likelihoods([g], int(t[b]) - 1)[0]
            live = np.array([len(gs) > 0 for gs in goals])
            for grp in np.unique(groups):
                rows = (np.asarray(groups) == grp) & live
                if rows.any():
                    best = max(ll[b, :len(goals[b])].max() for b in np.flatnonzero(rows))
                    ll[rows] -= best
        else:
            contexts = {}
            queries = []
            for b, _, g in flat:
                key = (int(episode[b]), int(t[b]))
                if key not in contexts:
                    contexts[key] = all_time_context(self.episodes[key[0]], key[1])
                c = contexts[key]
                queries.append(LikelihoodQuery(c.state, g, c.history, c.next_action))
            scores = llm_log_likelihood(self.scorer, queries, option_prefix=self.prefix)
            for (b, i, _), s in zip(flat, scores):
                ll[b, i] = s
        if self.prior == "symbolic":
            for b, i, g in flat:
                lp[b, i] = log_prior(g, self.episodes[int(episode[b])].apartment)
        elif self.prior == "llm":
            scores = llm_log_prior(self.scorer, [g for _, _, g in flat],
                                   option_prefix=self.prefix)
            for (b, i, _), s in zip(flat, scores):
                lp[b, i] = s
        return ll, lp


def all_time_context(episode, t: int):
    """The public reward's all-time likelihood question at t: the initial state, the key
    actions a_0..a_{t-1}, no separate next action."""
    s0 = episode.states[0]
    return LikelihoodContext(state=text.apartment_text(s0) + "\n" + text.agent_text(s0),
                             history=tuple(text.key_actions(episode.states, episode.actions, t)),
                             next_action=None)


# ---- rollouts ------------------------------------------------------------------------------
def task_records(episodes, config, stride: int = 1) -> list[dict]:
    """Unlabelled (episode, t) prompts: nothing about the goal is attached. One per timestep,
    or with `household.balance_episodes` the same number per episode (see `balanced`)."""
    h = config.mindzero.household
    records = [{"episode": e, "t": t}
               for e, t in hd.timestep_records(episodes, stride, h.after_first_key_action)]
    return balanced(records) if h.balance_episodes else records


def balanced(records: list[dict]) -> list[dict]:
    """Every episode the median episode's number of rows, at evenly spaced timesteps (long
    episodes thinned, short ones repeated), so that large goals (long episodes) do not
    outvote small ones in training as they cannot in the episode-averaged evaluation."""
    by: dict[int, list[dict]] = {}
    for r in records:
        by.setdefault(int(r["episode"]), []).append(r)
    per = int(np.median([len(rows) for rows in by.values()]))
    out = []
    for rows in by.values():
        out += [rows[i] for i in np.round(np.linspace(0, len(rows) - 1, per)).astype(int)]
    return out


class WarmupRollout:
    """Teacher particles as supervised completions (advantage 1, one per prompt); a record's
    target is drawn from `default_rng([seed, step, row])` (same on any process count and
    after a resume)."""

    def __init__(self, config, codec: Codec, episodes, prompts: Prompts):
        self.config, self.codec, self.episodes, self.prompts = config, codec, episodes, prompts

    def __call__(self, model, tasks, key, step) -> Rollout:
        d, w = self.config.mindzero.data, self.config.mindzero.warmup
        return teacher_rollout(tasks, step, self.config.trainer.seed, self.codec, self.prompts,
                               lambda e, t, rng: hd.warmup_target(
                                   self.episodes[e], t, d.num_particles, rng, w.teacher))


class ParticleRollout:
    """SSRL: `group_size` particle completions per prompt, rewarded by the ELBO."""

    def __init__(self, config, codec: Codec, prompts: Prompts, terms: RewardTerms):
        self.config, self.codec, self.prompts, self.terms = config, codec, prompts, terms
        self.rcfg = config.mindzero.reward

    def __call__(self, model, tasks, key, step) -> Rollout:
        c, n = self.config.trainer, self.config.mindzero.data.num_particles
        G = c.group_size
        prompts = [self.prompts(int(task["episode"]), int(task["t"]))
                   for task in tasks for _ in range(G)]
        episode = np.repeat([int(task["episode"]) for task in tasks], G)
        t = np.repeat([int(task["t"]) for task in tasks], G)
        groups = np.repeat([int(task["row"]) for task in tasks], G)
        completions = generate_rows(model, prompts, sample_rows(tasks, G), key=key,
                                    max_new_tokens=c.max_new_tokens, temperature=c.temperature,
                                    top_p=c.top_p, stop=list(self.codec.eos_ids),
                                    pad_id=self.codec.pad_id, rows_per_call=c.rollout_rows,
                                    **compact_kwargs(c))
        texts = [self.codec.decode(s) for s in completions]
        parsed = [parse_particles(x, mode="train", num_particles=n,
                                  duplicates=self.config.mindzero.reward.duplicates)
                  for x in texts]
        goals, q, ok = to_arrays(parsed, n)
        t0 = time.perf_counter()
        ll, lp = self.terms(episode, t, goals, groups, n)
        score_s = time.perf_counter() - t0
        reward, terms = hr.elbo_reward(ll, q, ok, lp, cfg=self.rcfg)
        adv = np.asarray(group_advantages(np.asarray(reward, np.float32), G,
                                          scale=c.advantage_scale,
                                          std_floor=c.advantage_std_floor))
        seqs, masks = completion_rows(prompts, completions)
        return Rollout(seqs, masks, adv.tolist(), groups.tolist(), count=len(seqs),
                       prompt_lens=[len(p) for p in prompts], metrics={
            "reward_mean": float(np.mean(reward)),
            "reward_sq": float(np.mean(np.square(reward))),
            "valid": float(np.mean(ok)),
            "likelihood": float(np.mean(terms["likelihood"][ok])) if ok.any() else 0.0,
            "prior": float(np.mean(terms["prior"][ok])) if ok.any() else 0.0,
            "q_entropy": float(np.mean(terms["entropy"][ok])) if ok.any() else 0.0,
            "adv_abs": float(np.mean(np.abs(adv))),
            "completion_tokens": float(np.mean([len(s) for s in completions])),
            "score_s": score_s,
            "flat_groups": float(np.mean(np.ptp(np.asarray(reward).reshape(-1, G), axis=1)
                                         == 0))})


# ---- held-out monitor ----------------------------------------------------------------------
def heldout_monitor(config, codec: Codec, episodes, num_rows: int | None = None):
    """An eval hook: greedy completions on a fixed sample of held-out (episode, t); mean log
    score of the true goal (1% uniform over the generator's goal space), top-1, well-formed
    share and distinct completions. Labels are read here only, for logging."""
    d = config.mindzero.data
    num_rows = num_rows or config.mindzero.household.monitor_rows
    records = hd.timestep_records(episodes, 1, config.mindzero.household.after_first_key_action)
    pick = np.random.default_rng(config.trainer.seed + 11).choice(
        len(records), min(num_rows, len(records)), replace=False)
    rows = [records[i] for i in np.sort(pick)]
    render = hd.get_observation(d.observation)
    prompts = [codec.prompt_ids(render(episodes[e], t, d.num_particles)) for e, t in rows]

    def score(step, model) -> dict:
        texts, _, _ = sample_completions(model, codec, prompts,
                                         key=jax.random.key(config.trainer.seed),
                                         temperature=0.0,
                                         max_new_tokens=config.trainer.max_new_tokens)
        parsed = [parse_particles(x, mode="eval", num_particles=d.num_particles) for x in texts]
        s = belief_scores(parsed, [episodes[e] for e, _ in rows], config.mindzero.eval.score_mix)
        return {"top1": float(np.mean(s["top1"])), "log_score": float(np.mean(s["log_score"])),
                "valid": float(np.mean([p.ok for p in parsed])),
                "distinct_completions": float(len(set(texts)))}
    return score


# ---- the task, for the one driver --------------------------------------------------------
def prepare(config, run_dir: Path, mesh):
    """Household goal particles for the one driver (`driver.train`): episodes on the train
    and test apartments, tokenizer, model; the teacher's warm-up (checked and retried as the
    gridworld's); SSRL on the household ELBO, whose LLM terms (if any) are scored by the
    model SSRL starts from, frozen."""
    train_eps, test_eps = hd.make_episodes(config, "train"), hd.make_episodes(config, "test")
    model, codec = build_model(config, run_dir, (train_eps, test_eps), mesh=mesh)
    prompts = Prompts(config, codec, train_eps)
    records = hd.timestep_records(train_eps, 1, config.mindzero.household.after_first_key_action)

    def ssrl_rollout(config, model):
        h = config.mindzero.household
        scorer = option_scorer(config, model, codec) if "llm" in (h.likelihood, h.prior) else None
        terms = RewardTerms(config, train_eps, scorer, chat=codec.chat)
        return ParticleRollout(config, codec, prompts, terms)

    return Prepared(
        model=model, codec=codec,
        row_len=lambda completion: row_len(config, prompts, records, completion),
        monitor=lambda config: heldout_monitor(config, codec, test_eps),
        warmup_tasks=task_records(train_eps, config),
        warmup_rollout=lambda config, wcfg: WarmupRollout(config, codec, train_eps, prompts),
        ssrl_tasks=task_records(train_eps, config, config.mindzero.data.stride),
        ssrl_rollout=ssrl_rollout,
        teacher_budget=teacher_budget(config, codec, train_eps) if
        config.mindzero.warmup.steps else 0,
        rebuild=lambda cfg: build_model(cfg, run_dir, mesh=mesh)[0],
        result={"train": train_eps, "test": test_eps},
        timings={"train_timesteps": len(records)})
