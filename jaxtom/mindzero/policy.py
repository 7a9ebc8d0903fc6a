"""The language-model side: tokenizer (trained BPE or a checkpoint's), prompt/completion
encoding, and batched sampling of particle completions.

The tiny CPU model reads `prompt <sep>` and writes `completion <eos>` with a byte-level BPE
trained on project-generated prompts and particle JSON (no pre-tokenizer split, so the JSON
boilerplate collapses into a few tokens and completions stay ~15 tokens). Chat models get their
chat template instead.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Sequence

import jax
import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, pre_tokenizers, trainers
from tokenizers import models as token_models

from jaxtom.gridworld.types import COLORS, SHAPES
from jaxtom.mindzero.observation import COMPACT_WORDS
from jaxtom.models.decoder import Decoder
from jaxtom.sampling.sampler import generate
from jaxtom.tokenizer import Tokenizer

PAD, EOS, SEP = "<pad>", "<eos>", "<sep>"


def train_bpe(texts: Sequence[str], vocab_size: int, path: str | Path | None = None) -> Tokenizer:
    """A byte-level BPE trained on `texts` (offline), with <pad>=0, <eos>, <sep> specials and
    every colour and shape word as one added token."""

    tok = HFTokenizer(token_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, EOS, SEP],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    # object words are whole tokens wherever they occur (prompt or JSON), so copying a label
    # from the observation into a particle is one token per word
    # and every distance of a compact observation is one token, so numbers compare cleanly
    tok.add_tokens(list(COLORS) + [f" {c}" for c in COLORS] + list(SHAPES) + [f" {s}" for s in SHAPES]
                   + list(COMPACT_WORDS))
    if path is not None:
        tok.save(str(path))
    return Tokenizer(tok, chat_format=None, eos_tokens=(EOS,))


def load_bpe(path: str | Path) -> Tokenizer:
    return Tokenizer.from_file(path, chat_format=None, eos_tokens=(EOS,))


@dataclasses.dataclass
class Codec:
    """How prompts and completions become token ids for one tokenizer."""
    tokenizer: Tokenizer
    chat: bool = False

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self.tokenizer.eos_token_ids

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.token_to_id(PAD)
        return 0 if pad is None else pad

    @functools.cached_property
    def decision_ids(self) -> frozenset[int]:
        """Token ids that carry a particle's choices: object words and anything with a digit."""
        words = set(COLORS) | set(SHAPES)
        texts = ((i, self.tokenizer.decode([i])) for i in range(self.tokenizer.vocab_size))
        return frozenset(i for i, text in texts
                         if text.strip() in words or any(ch.isdigit() for ch in text))

    @functools.cached_property
    def probability_markers(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(ids whose text ends just before a probability's first decimal, i.e. in "0.";
        the one-digit ids): where and among what `trainer.explore_temperature` explores."""
        texts = [(i, self.tokenizer.decode([i])) for i in range(self.tokenizer.vocab_size)]
        return (tuple(i for i, text in texts if text.endswith("0.")),
                tuple(i for i, text in texts if len(text) == 1 and text.isdigit()))

    def prompt_ids(self, prompt: str) -> list[int]:
        if self.chat:
            return self.tokenizer.encode_chat([{"role": "user", "content": prompt}])
        return self.tokenizer.encode(prompt) + [self.tokenizer.token_to_id(SEP)]

    def completion_ids(self, completion: str) -> list[int]:
        return self.tokenizer.encode(completion) + list(self.eos_ids[:1])

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids if int(i) not in self.eos_ids]
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def padded_rows(n: int, minimum: int = 32) -> int:
    """Rows a `sample_completions` call runs: `n` rounded up to a power of two (at least
    `minimum`). The evaluation's calls shrink as episodes end (one call per timestep, and
    per helper step); with the sampler's own finer row buckets each size would compile its
    own prefill and decode programs, which cost more than decoding a few idle rows of the
    tiny model (so nothing below 32 rows, which would be more programs for the last few
    queries)."""
    size = max(int(minimum), 1)
    while size < n:
        size *= 2
    return size


def sample_completions(model: Decoder, codec: Codec, prompts: Sequence[Sequence[int]], *,
                       key: jax.Array, temperature: float, max_new_tokens: int,
                       pad_rows: bool = False):
    """One sampler call for all rows: (texts, generated token lists incl. the stop token,
    prompt + generated token counts). `pad_rows` (for a small model called with many batch
    sizes): rows padded to `padded_rows` with copies of the first prompt, appended last, so
    row i keeps its id and key and its sample is unchanged."""
    prompts = list(prompts)
    extra = padded_rows(len(prompts)) - len(prompts) if pad_rows else 0
    out = generate(model, prompts + prompts[:1] * extra, max_new_tokens=max_new_tokens,
                   temperature=temperature, key=key, stop=list(codec.eos_ids),
                   pad_id=codec.pad_id)
    seqs = out.sequences()[:len(prompts)]
    texts = [codec.decode(s) for s in seqs]
    tokens = np.array([len(p) + len(s) for p, s in zip(prompts, seqs)])
    return texts, seqs, tokens
