"""How a QA model is scored in the paper's protocol (section 5.1, Table 4a; the run's table is
`jaxtom.mindzero.qa_train.evaluate_qa_run`): the model answers each
held-out question itself, greedily and sampled at the public code's validation settings
(temperature 0.8, top-p 0.95, one answer per question); accuracy per question type and
overall (episode-clustered SE), beside the starting model (the warm-up checkpoint, or the
initial weights), the exact posterior (1 by construction: questions are posed only where it
picks the truth), the reward's own choice (the option whose goal explains the actions best,
i.e. the answer SSRL's reward favours), and a random answerer; TFLOPs per question (appendix
A.2: 2 x active parameters x prompt and answer tokens)."""

from __future__ import annotations


import numpy as np

from jaxtom.eval import metrics
from jaxtom.gridworld.qa import QUESTION_TYPES
from jaxtom.eval.answers import parse_answer
from jaxtom.mindzero.qa import QAPrompts

SAMPLED = {"temperature": 0.8, "top_p": 0.95}  # the public code's validation sampling
COLUMNS = (("type1", "type 1 (which pick)"), ("type2", "type 2 (which target)"),
           ("type3", "type 3 (target while carrying)"), ("overall", "overall"))


def answer(model, codec, prompts: QAPrompts, *, max_new_tokens: int, key, temperature=0.0,
           top_p=1.0, rows_per_call: int = 256, parse=parse_answer):
    """(choices [Q] in {0, 1, -1}, texts, tokens processed per question) of `model` on every
    question of `prompts` (`parse(text, option labels)`: the domain's answer parser); row i
    samples with its own key, so chunking changes nothing."""
    n = len(prompts.questions)
    texts, tokens = [], []
    for lo in range(0, n, rows_per_call):
        index = list(range(lo, min(lo + rows_per_call, n)))
        seqs = prompts.sample(model, index, key=key, row_ids=np.asarray(index),
                              max_new_tokens=max_new_tokens, temperature=temperature,
                              top_p=top_p, stop=list(codec.eos_ids), pad_id=codec.pad_id)
        for i, s in zip(index, seqs):
            texts.append(codec.decode(s))
            tokens.append(len(prompts(i)) + len(s))
    choices = np.array([parse(x, prompts.labels(i)) for i, x in enumerate(texts)])
    return choices, texts, np.asarray(tokens, float)


def accuracy_table(choices, questions) -> dict:
    """Accuracy per type (SE over its questions, clustered by episode) and overall
    (episode-clustered); an unparseable answer (-1) is wrong."""
    if len(choices) != len(questions) or not questions:
        raise ValueError(f"need one choice per question, got {len(choices)} for "
                         f"{len(questions)}")
    correct = (np.asarray(choices) == np.array([q.answer for q in questions])).astype(float)
    episode = np.array([q.episode for q in questions])
    kinds = np.array([q.kind for q in questions])
    entry = {"valid": float(np.mean(np.asarray(choices) >= 0)),
             "answer_a": float(np.mean(np.asarray(choices) == 0))}
    entry["overall"], entry["overall_se"] = metrics.cluster_mean_sem(correct, episode)
    for kind in QUESTION_TYPES:
        m = kinds == kind
        entry[f"type{kind}"], entry[f"type{kind}_se"] = (
            metrics.cluster_mean_sem(correct[m], episode[m]) if m.any() else (np.nan, np.nan))
        entry[f"type{kind}_n"] = int(m.sum())
    return entry


def baseline_choices(questions, table, seed: int) -> dict[str, np.ndarray]:
    """Answers of the model-free rows: exact posterior, the reward's argmax, coin flips."""
    ll = np.array([table[q.episode, q.step, list(q.option_goals)] for q in questions])
    rng = np.random.default_rng(seed)
    flips = rng.integers(0, 2, len(questions))
    by_reward = np.where(ll[:, 0] == ll[:, 1], flips, np.argmax(ll, axis=1))
    return {"exact posterior": np.array([q.answer for q in questions]),
            "reward's choice (likelihood argmax)": by_reward,
            "random answerer": rng.integers(0, 2, len(questions))}


def markdown(results: dict) -> str:
    lines = [f"QA accuracy (Table 4a protocol: the model answers each question itself; binary "
             f"choice, chance 0.5): {results['episodes']} held-out episodes, "
             f"{results['questions']} questions (mean ± SE; overall episode-clustered). "
             "Sampled: temperature 0.8, top-p 0.95, one answer per question.", "",
             "| method | " + " | ".join(c for _, c in COLUMNS)
             + " | parsed | answers `a` | distinct answers | TFLOPs/question |",
             "|---|" + "---|" * (len(COLUMNS) + 4)]
    for name, e in results["accuracy"].items():
        cells = [f"{e[k]:.3f} ± {e[k + '_se']:.3f}" for k, _ in COLUMNS]
        tf = e.get("tflops_per_question")
        cells += [f"{e['valid']:.2f}", f"{e['answer_a']:.2f}",
                  str(e.get("distinct_answers", "–")), f"{tf:.2e}" if tf is not None else "–"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

