"""The LLM user simulator of appendix C.3 run through jaxtom's own sampler.

Any model jaxtom can load plays the user: each request's C.3 prompt (`simulator_prompt`) is
sent as one user message through the model's chat template, exactly as the HTTP client sends
it to vLLM, and all requests of a call are sampled as one batch (temperature 0.7, as in table
4). The reply is read the same way as the HTTP client's (`reply_from_output`): the JSON
`response` field, else the raw text; `[[TERMINATE CHAT]]` anywhere becomes the end signal.
A request whose prompt does not fit the model's context gets `SimReply("", error=...)`, so
the controller marks that conversation failed while the rest of the batch goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Sequence

import jax

from jaxtom.ctom.simulators import (SimReply, SimRequest, SimulatorError, reply_from_output,
                                    simulator_prompt)


@dataclasses.dataclass
class LLMSimulator:
    """`reply(requests, seed)` with a loaded `jaxtom.models` decoder and its tokenizer.

    `generate_fn` defaults to `jaxtom.sampling.sampler.generate`; tests pass a wrapper to see what the
    sampler was given. `chat_options` go to the chat template (e.g. enable_thinking=False).
    """
    model: Any
    tokenizer: Any
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    batch_size: int = 32
    max_cache_len: int | None = None
    chat_options: dict = dataclasses.field(default_factory=dict)
    strict: bool = False
    generate_fn: Callable | None = None
    # the sampler is a collective on a global mesh: on several processes every process calls
    # `reply` with the same requests (`lockstep.shared_simulator` leaves it unwrapped)
    collective: ClassVar[bool] = True

    def prompt_ids(self, request: SimRequest) -> list[int]:
        """The C.3 prompt as one user turn, ending with an open assistant turn."""
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": simulator_prompt(request)}],
            add_generation_prompt=True, **self.chat_options)
        return self.tokenizer.encode(text)

    def _context_limit(self) -> int:
        limit = self.model.config.max_position_embeddings
        return min(self.max_cache_len or limit, limit)

    def reply(self, requests: Sequence[SimRequest], seed: int = 0) -> list[SimReply]:
        if self.batch_size < 1 or self.max_tokens < 1:
            raise ValueError(f"LLMSimulator needs batch_size >= 1 and max_tokens >= 1, got "
                             f"{self.batch_size} and {self.max_tokens}")
        generate = self.generate_fn
        if generate is None:
            from jaxtom.sampling import generate
        key = jax.random.key(seed)
        out: list[SimReply | None] = [None] * len(requests)
        rows: list[tuple[int, list[int]]] = []
        limit = self._context_limit()
        for i, request in enumerate(requests):
            ids = self.prompt_ids(request)
            if len(ids) + self.max_tokens > limit:
                msg = (f"simulator prompt of {len(ids)} tokens + max_tokens={self.max_tokens} "
                       f"exceeds the simulator model's context of {limit} tokens")
                if self.strict:
                    raise SimulatorError(msg)
                out[i] = SimReply("", msg)
            else:
                rows.append((i, ids))
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            result = generate(self.model, [ids for _, ids in chunk],
                              max_new_tokens=self.max_tokens, temperature=self.temperature,
                              top_p=self.top_p, key=jax.random.fold_in(key, start),
                              tokenizer=self.tokenizer, max_cache_len=self.max_cache_len)
            for (i, _), ids in zip(chunk, result.sequences()):
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                out[i] = SimReply(reply_from_output(text))
        return out
