"""A tiny chat model for CToM tests that run the real sampler: a byte-level BPE with ChatML
specials trained on the texts it will encode, and a one-layer random Qwen3 decoder."""

from tokenizers import Tokenizer as HFTokenizer, decoders, models as tm, pre_tokenizers, trainers

from jaxtom.models import init_decoder
from jaxtom.models.config import ModelConfig
from jaxtom.tokenizer import Tokenizer


def chatml_bpe(corpus: list[str], vocab_size: int = 1200) -> Tokenizer:
    bpe = HFTokenizer(tm.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return Tokenizer(bpe, chat_format="qwen3", eos_tokens=("<|im_end|>",))


def tiny_chat_model(tok: Tokenizer, max_positions: int):
    cfg = ModelConfig(family="qwen3", vocab_size=tok.vocab_size, hidden_size=32,
                      intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                      head_dim=16, qk_norm=True, max_position_embeddings=max_positions,
                      eos_token_ids=tok.eos_token_ids)
    return init_decoder(cfg, seed=0)
