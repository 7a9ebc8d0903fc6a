"""MindZero QA training (section 5.1): the answer parser, the reward against a float64 NumPy
computation from the reference planner's likelihoods, the prompts, the rollouts on scripted
answers, and the evaluation's scoring."""
import dataclasses
import math

import jax
import numpy as np
import pytest

from jaxtom.gridworld import qa_episodes, reference
from jaxtom.gridworld.text import QA_INSTRUCTION
from jaxtom.mindzero import qa as qa_lib
from jaxtom.mindzero.observation import HostEpisodes
from jaxtom.mindzero.qa_eval import accuracy_table, baseline_choices
from jaxtom.mindzero.qa_train import QASet, likelihood_table
from jaxtom.mindzero.reward import RewardConfig
from jaxtom.models.vl_prompts import IMAGE_PLACEHOLDER
from jaxtom.rl.losses import group_advantages
from jaxtom.rl.trainer import TrainerConfig
from tests.tolerance import float32_tol

LOG_FLOOR = math.log(1e-12)


@pytest.fixture(scope="module")
def qa_set(params):
    return QASet.make(*qa_episodes(jax.random.key(5), params, 4, batch_size=256))


class _Config:  # what likelihood_table reads of a run config
    class mindzero:
        class data:
            max_steps = 50


@pytest.fixture(scope="module")
def table(qa_set):
    return likelihood_table(qa_set, _Config)


# --- the answer ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("a", 0), ("b", 1), ("B", 1), (" (a) ", 0), ("b.", 1), ("(b).", 1), ("Answer: b", 1),
    ("b) green square", 1), ("<think>a or b?</think> b", 1), ("a\n", 0),
])
def test_parse_answer_accepts_one_letter_in_any_wrapping(text, expected):
    assert qa_lib.parse_answer(text) == expected


@pytest.mark.parametrize("text", [
    "", "   ", "c", "(c)", "a or b", "a b", "(a) (b)", "ab", "ba", "abc", "bad", "a)(c)",
    "<think>a", "1", None, 3, "the answer", "d) a",
])
def test_parse_answer_rejects_hedges_and_junk(text):
    assert qa_lib.parse_answer(text) == -1


def test_parse_answer_rejects_a_letter_that_contradicts_the_named_option():
    labels = ("orange square", "green square")
    assert qa_lib.parse_answer("a) orange square", labels) == 0
    assert qa_lib.parse_answer("a) green square", labels) == -1
    assert qa_lib.parse_answer("b green square", labels) == 1
    assert qa_lib.parse_answer("a green square or orange square", labels) == 0


# --- the reward against NumPy ----------------------------------------------------------------
def _reference_log_liks(episodes, e, params):
    """float64 [T, G] per-step log-likelihoods of episode e from the reference planner."""
    traj = episodes.trajectories
    n = int(np.asarray(traj.valid[e]).sum())
    walls = np.asarray(traj.layout.walls[e])
    states = [reference.RefState(
        walls=walls, obj_pos=[tuple(p) for p in np.asarray(traj.obj_pos[e, t]).tolist()],
        human_pos=tuple(np.asarray(traj.human_pos[e, t]).tolist()), helper_pos=(0, 0),
        human_holding=int(traj.human_holding[e, t]),
        helper_holding=int(traj.helper_holding[e, t]),
        human_last_action=int(traj.human_last_action[e, t]), helper_stays=0, goal=(0, 1))
        for t in range(n)]
    return reference.step_log_likelihoods(states, np.asarray(traj.action[e, :n]), params)


def test_reward_matches_numpy_from_the_planner_likelihoods(qa_set, table, params):
    """Per question: the right letter, the wrong letter and three unparseable answers, each
    scored by `qa_rewards` against sum_{s < t} log P(a_s | goal of the chosen option) in
    float64 from the reference planner, or (t + 1) log(1e-12) for a bad answer."""
    ref = {e: _reference_log_liks(qa_set.episodes, e, params) for e in range(len(qa_set.view))}
    texts, qs, expected, scale = [], [], [], []
    for q in qa_set.questions:
        steps = ref[q.episode][:q.step]
        for text, choice in (("ab"[q.answer], q.answer), (f"({'ab'[1 - q.answer]})", 1 - q.answer),
                             ("a or b", -1), ("(c)", -1), ("", -1)):
            texts.append(text)
            qs.append(q)
            if choice < 0:
                expected.append((q.step + 1) * LOG_FLOOR)
                scale.append(abs(expected[-1]))
            else:
                column = steps[:, q.option_goals[choice]]
                expected.append(column.sum())
                scale.append(np.abs(column).sum())
    choice = np.array([qa_lib.parse_answer(x) for x in texts])
    got = qa_lib.qa_rewards(table, [q.episode for q in qs], [q.step for q in qs],
                            [q.option_goals for q in qs], choice)
    # each step's value is the float64 likelihood rounded once to float32 (EPS32 relative),
    # then t of them are summed in float32: t + 1 roundings on terms of total size `scale`
    tol = np.array([float32_tol(s, q.step + 1) for s, q in zip(scale, qs)])
    expected = np.array(expected)
    assert np.all(np.abs(got - expected) <= tol), np.max(np.abs(got - expected) - tol)
    # the cases differ: the right answer explains the actions better than the wrong one, and
    # every parseable answer scores above every unparseable one at its step
    right, wrong, bad = got[0::5], got[1::5], got[2::5]
    assert np.mean(right > wrong) > 0.5 and np.all(np.minimum(right, wrong) > bad)
    # one step too many or too few is caught by the same tolerance
    for shift in (-1, 1):
        off = np.array([ref[q.episode][:q.step + shift, q.option_goals[q.answer]].sum()
                        for q in qs[0::5]])
        assert np.any(np.abs(right - off) > tol[0::5])


def test_public_constant_penalty_is_an_option():
    table = np.full((1, 5, 56), -3.0, np.float32)
    cfg = RewardConfig(format_penalty=-27.63)
    got = qa_lib.qa_rewards(table, [0, 0], [4, 4], [(0, 1), (0, 1)], [-1, 0], cfg)
    np.testing.assert_array_equal(got, np.float32([-27.63, -3.0]))
    with pytest.raises(ValueError, match="steps in 0..4"):
        qa_lib.qa_rewards(table, [0], [5], [(0, 1)], [0])


# --- prompts -------------------------------------------------------------------------------
def test_compact_question_reads_observed_states_only(qa_set):
    view, q = qa_set.view, qa_set.questions[0]
    text = qa_lib.compact_question(view, q)
    labels = view.labels[q.episode]
    assert text.startswith(qa_lib.COMPACT_KIND[q.kind] + f" | given {labels[q.given]} | a ")
    assert f"| a {labels[q.options[0]]} " in text and f"| b {labels[q.options[1]]} " in text
    # the goal is never read: another goal gives the same line
    other = HostEpisodes(**{**view.__dict__, "goal": view.goal[:, ::-1].copy()})
    assert qa_lib.compact_question(other, q) == text
    # every option's off-path count is a count of moves
    for q in qa_set.questions:
        for o in q.options:
            assert 0 <= qa_lib.off_path_moves(view, q.episode, q.step, o) <= q.step


def test_figure_question_is_figure6_with_the_transcript(qa_set):
    q = next(q for q in qa_set.questions if q.kind == 1)
    text = qa_lib.figure_question(qa_set.view, q)
    assert text.endswith(QA_INSTRUCTION) and "Action trajectory (human, name + delta):" in text
    assert "which object is the Human more likely to pick up next? (a) " in text
    pictured = qa_lib.render_question("image", qa_set.view, q)  # Figure 6 with the picture
    assert pictured.count(IMAGE_PLACEHOLDER) == 1 and "Action trajectory" not in pictured
    assert "which object is the Human more likely to pick up next? (a) " in pictured
    with pytest.raises(ValueError, match="unknown QA observation"):
        qa_lib.render_question("pictures", qa_set.view, q)


# --- rollouts on scripted answers ------------------------------------------------------------
class _Codec:
    """One token per character; 0 is eos."""
    eos_ids, pad_id = (0,), 0

    def prompt_ids(self, text):
        return [1 + (ord(c) % 50) for c in text[:20]]

    def completion_ids(self, text):
        return [ord(c) for c in text] + [0]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)


def test_qa_rollout_rewards_scripted_answers(qa_set, table, monkeypatch):
    answers = ["a", "b", "a b", "(c)"]
    monkeypatch.setattr(qa_lib, "generate_rows", lambda model, prompts, rows, **kw: [
        [ord(c) for c in answers[int(r) % 4]] + [0] for r in rows])
    prompts = qa_lib.QAPrompts("compact", _Codec(), qa_set.view, qa_set.questions)
    cfg = TrainerConfig(group_size=4, max_new_tokens=3)
    rollout = qa_lib.QARollout(cfg, RewardConfig(), _Codec(), prompts, table)
    tasks = [{"question": i, "row": j} for j, i in enumerate((0, 2))]
    out = rollout(None, tasks, jax.random.key(0), 0)
    rewards = []
    for task in tasks:
        q = qa_set.questions[task["question"]]
        ll = table[q.episode, q.step, list(q.option_goals)]
        rewards += [ll[0], ll[1], (q.step + 1) * LOG_FLOOR, (q.step + 1) * LOG_FLOOR]
    np.testing.assert_allclose(out.advantages, group_advantages(np.float32(rewards), 4),
                               rtol=0, atol=1e-5)
    assert out.metrics["valid"] == 0.5 and out.metrics["answer_a"] == 0.25
    assert out.group_ids == [0] * 4 + [1] * 4
    assert all(m[:len(p)] == [0.0] * len(p) for m, p in zip(
        out.policy_masks, [prompts(i) for i in (0, 0, 0, 0, 2, 2, 2, 2)]))


@pytest.mark.parametrize("scale, floor", [("none", 0.0), ("batch", 0.0), ("group", 1e4)])
def test_qa_rollout_advantages_follow_trainer_advantage_scale(qa_set, table, monkeypatch,
                                                              scale, floor):
    """`trainer.advantage_scale` / `advantage_std_floor` act on QA (and household QA, its
    subclass) as on the goal rollout: the one advantage function with the config's scale."""
    answers = ["a", "b", "a b", "(c)"]
    monkeypatch.setattr(qa_lib, "generate_rows", lambda model, prompts, rows, **kw: [
        [ord(c) for c in answers[int(r) % 4]] + [0] for r in rows])
    prompts = qa_lib.QAPrompts("compact", _Codec(), qa_set.view, qa_set.questions)
    tasks = [{"question": i, "row": j} for j, i in enumerate((0, 2))]
    out = {}
    for s, f in (("group", 0.0), (scale, floor)):
        cfg = TrainerConfig(group_size=4, max_new_tokens=3, advantage_scale=s,
                            advantage_std_floor=f)
        rollout = qa_lib.QARollout(cfg, RewardConfig(), _Codec(), prompts, table)
        out[s, f] = np.asarray(rollout(None, tasks, jax.random.key(0), 0).advantages)
    rewards = []
    for task in tasks:
        q = qa_set.questions[task["question"]]
        ll = table[q.episode, q.step, list(q.option_goals)]
        rewards += [ll[0], ll[1], (q.step + 1) * LOG_FLOOR, (q.step + 1) * LOG_FLOOR]
    want = group_advantages(np.float32(rewards), 4, scale=scale, std_floor=floor)
    np.testing.assert_allclose(out[scale, floor], want, rtol=0, atol=1e-5)
    assert not np.allclose(out[scale, floor], out["group", 0.0])


def test_qa_rollout_packs_shared_prompts(qa_set, table, monkeypatch):
    """`trainer.share_prompts` acts on QA: the rollout reports its prompt lengths, so each
    group's prompt is packed once."""
    from jaxtom.rl.trainer import pack_rollout
    monkeypatch.setattr(qa_lib, "generate_rows", lambda model, prompts, rows, **kw: [
        [ord("ab"[int(r) % 2])] + [0] for r in rows])
    prompts = qa_lib.QAPrompts("compact", _Codec(), qa_set.view, qa_set.questions)
    cfg = TrainerConfig(group_size=4, max_new_tokens=3, row_len=128)
    out = qa_lib.QARollout(cfg, RewardConfig(), _Codec(), prompts, table)(
        None, [{"question": 1, "row": 0}], jax.random.key(0), 0)
    assert out.prompt_lens == [len(prompts(1))] * 4
    plain = pack_rollout(out, cfg)
    shared = pack_rollout(out, dataclasses.replace(cfg, share_prompts=True))
    assert shared.parent_ids is not None and shared.tokens.shape[0] == 1
    assert (np.asarray(shared.segment_ids) > 0).sum() < (np.asarray(plain.segment_ids) > 0).sum()


def test_mirrored_groups_swap_the_letters_and_their_goals(qa_set, table, monkeypatch):
    seen = []

    def answer_a(model, prompts, rows, **kw):
        seen.append(list(rows))
        return [[ord("a"), 0] for _ in rows]

    monkeypatch.setattr(qa_lib, "generate_rows", answer_a)
    prompts = qa_lib.QAPrompts("compact", _Codec(), qa_set.view, qa_set.questions)
    n = len(qa_set.questions)
    rollout = qa_lib.QARollout(TrainerConfig(group_size=2), RewardConfig(), _Codec(), prompts,
                               table, mirror=True)
    assert len(prompts.questions) == 2 * n
    q, m = prompts.questions[1], prompts.questions[n + 1]
    assert (m.options, m.option_goals, m.answer) == (q.options[::-1], q.option_goals[::-1],
                                                     1 - q.answer)
    assert prompts.text(n + 1) != prompts.text(1)
    out = rollout(None, [{"question": 1, "row": 0}], jax.random.key(0), 0)
    assert seen == [[0, 1, 2, 3]] and out.group_ids == [0, 0, 1, 1]
    # answering `a` to both orders: the right letter in exactly one of them
    assert out.metrics["agrees_with_posterior"] == 0.5 and out.metrics["answer_a"] == 1.0


def test_warmup_letters_are_uniform_and_never_read_the_answer(qa_set):
    prompts = qa_lib.QAPrompts("compact", _Codec(), qa_set.view, qa_set.questions)
    rollout = qa_lib.QAWarmupRollout(_Codec(), prompts, seed=3)
    tasks = [{"question": i % len(qa_set.questions), "row": i} for i in range(400)]
    letters = [s[-2] for s in rollout(None, tasks, None, 7).sequences]
    assert set(letters) == {ord("a"), ord("b")}
    assert 0.4 < np.mean([c == ord("a") for c in letters]) < 0.6
    flipped = [q.__class__(**{**q.__dict__, "answer": 1 - q.answer}) for q in qa_set.questions]
    prompts.questions = flipped
    again = [s[-2] for s in rollout(None, tasks, None, 7).sequences]
    assert again == letters


# --- evaluation ----------------------------------------------------------------------------
def test_accuracy_table_and_baselines(qa_set, table):
    qs = qa_set.questions
    base = baseline_choices(qs, table, seed=0)
    exact = accuracy_table(base["exact posterior"], qs)
    assert exact["overall"] == 1.0 and exact["overall_se"] == 0.0
    assert [exact[f"type{k}_n"] for k in (1, 2, 3)] == [len(qa_set.view)] * 3
    wrong = accuracy_table(1 - base["exact posterior"], qs)
    junk = accuracy_table(np.full(len(qs), -1), qs)
    assert wrong["overall"] == junk["overall"] == 0.0 and junk["valid"] == 0.0
    assert 0.0 <= accuracy_table(base["random answerer"], qs)["overall"] <= 1.0
    # the reward's choice is right on the questions whose likelihoods pick the truth
    ll = np.array([table[q.episode, q.step, list(q.option_goals)] for q in qs])
    decided = ll[:, 0] != ll[:, 1]
    by_reward = base["reward's choice (likelihood argmax)"]
    assert np.array_equal(by_reward[decided], np.argmax(ll[decided], 1))
    with pytest.raises(ValueError, match="one choice per question"):
        accuracy_table([0], qs)
