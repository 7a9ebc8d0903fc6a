"""MindZero QA on pictures (Table 4a's setting: Qwen3-VL reads Figure 6's question with the
rendered grid): a tiny VL run trains (warm-up, SSRL) and evaluates through the same QA
driver as text runs. The held-out questions and the model-free rows must equal the text
run's to the digit; the rollout and the evaluation must sample a question alike; every
question shows the picture of its own step."""

import dataclasses

import jax
import numpy as np
import pytest

from jaxtom.mindzero import driver
from jaxtom import flops
from jaxtom.config import load_config
from jaxtom.mindzero import qa_eval, qa_train
from jaxtom.mindzero.observation import observation_image
from jaxtom.models.image_processing import num_image_tokens, preprocess_image
from jaxtom.models.vl_prompts import IMAGE_PAD

SMALL = ["mindzero.data.train_episodes=16", "mindzero.data.eval_episodes=6",
         "trainer.total_steps=4", "step.warmup_steps=0",
         "mindzero.warmup.steps=2", "mindzero.warmup.batch_size=8", "trainer.eval_every=2",
         "trainer.checkpoint_every=2", "trainer.prompts_per_step=2", "trainer.group_size=4"]
IMAGE = ["mindzero.data.observation=image", "mindzero.data.image_cell_size=16"]


def _questions(qa_set):
    return [(q.episode, q.step, q.kind, q.given, tuple(q.options), q.answer)
            for q in qa_set.questions]


@pytest.mark.slow
def test_image_qa_trains_and_evaluates_like_the_text_path(tmp_path):
    cfg = load_config("configs/mindzero_qa_tiny.py",
                      SMALL + IMAGE + [f"trainer.workdir={tmp_path / 'vl'}"])
    text_cfg = load_config("configs/mindzero_qa_tiny.py", SMALL)
    out = driver.train(cfg, progress=False)
    test = out["test"]
    assert out["state"].step == cfg.trainer.total_steps
    results = qa_train.evaluate_qa_run(cfg, tmp_path / "vl" / "checkpoint", test=test)

    # the same held-out questions and model-free rows as the text observation
    _, text_test = qa_train.qa_data(text_cfg)
    assert _questions(test) == _questions(text_test) and len(test.questions) > 0
    baselines = qa_eval.baseline_choices(text_test.questions,
                                         qa_train.likelihood_table(text_test, text_cfg),
                                         text_cfg.trainer.seed)
    for name, choices in baselines.items():
        assert results["accuracy"][name] == qa_eval.accuracy_table(choices, text_test.questions)
    assert results["accuracy"]["exact posterior"]["overall"] == 1.0

    model, codec = qa_train.load_model(cfg, tmp_path / "vl" / "checkpoint")
    prompts = qa_train.question_prompts(cfg, codec, test, model)
    vl = model.config
    for name in ("MindZero (greedy)", "untrained (sampled)"):
        row = results["accuracy"][name]
        assert 0.0 <= row["overall"] <= 1.0 and 0.0 <= row["valid"] <= 1.0
        # TFLOPs: the decoder over every token plus the vision tower over the picture
        decoder_only = flops.inference_tflops(vl.text.num_params(), 1)
        per_token, per_picture = prompts.tflops_per_token_and_picture(model)
        assert per_token == pytest.approx(decoder_only, rel=1e-9)
        assert per_picture == pytest.approx(
            flops.inference_tflops(vl.vision.num_params(), prompts.num_patches), rel=1e-9)
        assert row["tflops_per_question"] > per_picture > 0

    # every question shows its own step's picture, expanded to the picture's tokens
    q0 = test.questions[0]
    later = next(i for i, q in enumerate(test.questions)
                 if (q.episode, q.step) != (q0.episode, q0.step))
    patches, grid = prompts.image(0)
    expected, _ = preprocess_image(observation_image(test.view, q0.episode, q0.step,
                                                     cfg.mindzero.data.image_cell_size),
                                   vl.vision)
    np.testing.assert_array_equal(patches, expected)
    assert not np.array_equal(prompts.image(later)[0], patches)
    assert prompts(0).count(vl.image_token_id) == num_image_tokens(grid, vl.vision) > 0
    assert codec.tokenizer.token_to_id(IMAGE_PAD) == vl.image_token_id

    # the rollout's sampler and the evaluation's sample a question alike (row-keyed)
    index, kw = [0, later, 1], dict(max_new_tokens=3, temperature=1.0, stop=list(codec.eos_ids),
                                    pad_id=codec.pad_id)
    key = jax.random.key(3)
    rollout = prompts.generate_rows(model, index, np.arange(3), key=key, **kw)
    evaluation = prompts.sample(model, index, key=key, row_ids=np.arange(3), **kw)
    assert [list(s) for s in rollout] == [list(s) for s in evaluation]
    assert dataclasses.asdict(cfg.mindzero.eval) == dataclasses.asdict(text_cfg.mindzero.eval)
