"""The in-process LLM user simulator: C.3 prompts through jaxtom's sampler on a tiny random
model with a small BPE tokenizer; reply parsing for well-formed, malformed and terminate
outputs; context overflow; the `simulator="llm"` setting."""

import dataclasses

import jax
import pytest

from jaxtom.sampling import sampler
from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.policies import SamplerPolicy, ScriptedPolicy
from jaxtom.ctom.prompts import SIMULATOR_PROMPTS
from jaxtom.ctom.satisfaction import END_SIGNAL
from jaxtom.ctom.simulators import SimRequest, SimulatorError
from jaxtom.ctom.simulators_llm import LLMSimulator
from jaxtom.ctom.train import make_simulator
from jaxtom.ctom.config import CToMSettings

from .tiny_chat import chatml_bpe, tiny_chat_model

MATH = builtin_tasks("math")[1]  # answer 8
CODE = builtin_tasks("coding")[8]
WRITE = builtin_tasks("writing")[0]


@pytest.fixture(scope="module")
def tok():
    """A byte-level BPE trained on the C.3 prompts (short prompts) with ChatML specials."""
    corpus = list(SIMULATOR_PROMPTS.values()) + [t.prompt + " " + t.hidden for t in
                                                 (MATH, CODE, WRITE)]
    return chatml_bpe(corpus)


@pytest.fixture(scope="module")
def model(tok):
    return tiny_chat_model(tok, max_positions=2048)


def req(task, *history, final=False):
    return SimRequest(task, tuple(history), final)


class Recorder:
    """Wraps a generate function; keeps what the simulator handed the sampler."""

    def __init__(self, fn=sampler.generate):
        self.fn, self.calls = fn, []

    def __call__(self, model, prompts, **kw):
        self.calls.append((prompts, kw))
        return self.fn(model, prompts, **kw)


def canned(tok, texts):
    """A generate stand-in whose rows are `texts` (or one text for all) + end of turn."""
    @dataclasses.dataclass
    class Result:
        rows: list

        def sequences(self):
            return self.rows

    def fn(model, prompts, **kw):
        rows = texts * len(prompts) if len(texts) == 1 else texts  # one text: every row
        assert len(prompts) == len(rows)
        return Result([tok.encode(t) + list(tok.eos_token_ids) for t in rows])
    return fn


REQUESTS = [req(MATH, ("user", MATH.prompt), ("assistant", r"x = \boxed{9}")),
            req(CODE, ("user", CODE.prompt), ("assistant", "def task_func(n): ..."), final=True),
            req(WRITE, ("user", WRITE.prompt), ("assistant", "What are the new hours?"))]


def test_prompts_go_through_the_sampler_in_one_batch_at_temperature_07(tok, model):
    rec = Recorder()
    sim = LLMSimulator(model, tok, max_tokens=6, generate_fn=rec)
    out = sim.reply(REQUESTS, seed=3)
    [(prompts, kw)] = rec.calls  # every conversation in one sampler call
    assert len(prompts) == 3 and kw["temperature"] == 0.7 and kw["max_new_tokens"] == 6
    texts = [tok.decode(p) for p in prompts]
    assert all(t.startswith("<|im_start|>user\n/no_think") and
               t.endswith("<|im_end|>\n<|im_start|>assistant\n") for t in texts)
    assert "expert user who wants the answer quickly" in texts[0]  # C.3 math instructions
    assert f"**User**: {MATH.prompt}\n**Assistant**: x = \\boxed{{9}}" in texts[0]
    assert MATH.reference in texts[0]
    assert "respond exactly with \"[[TERMINATE CHAT]]\"" in texts[1]  # C.3 coding
    assert CODE.hidden in texts[1] and "**Assistant**: I WANT TO ANSWER:\ndef task_func" in texts[1]
    assert "**Assistant**: What are the new hours?" in texts[2] and WRITE.hidden in texts[2]
    # a random model writes no JSON: the raw text is the reply (as the HTTP client does)
    assert all(r.error is None and isinstance(r.text, str) and len(r.text) <= 400 for r in out)
    assert [r.text for r in sim.reply(REQUESTS, seed=3)] == [r.text for r in out]  # same key


def test_well_formed_malformed_and_terminate_replies(tok, model):
    outputs = ['{"current_status": "x", "thought": "y", "response": "That\'s wrong, check it."}',
               '```json\n{"current_status": "done", "response": "[[TERMINATE CHAT]]"}\n```',
               "<think>\nhmm\n</think>\n\nSure, the hours are 9 to 5",  # malformed: raw text
               '{"response": "ok, [[TERMINATE CHAT]]',  # broken JSON carrying the end signal
               "",  # nothing at all
               "x" * 900]
    sim = LLMSimulator(model, tok, generate_fn=canned(tok, outputs))
    out = sim.reply([REQUESTS[0]] * len(outputs))
    assert [r.text for r in out] == ["That's wrong, check it.", END_SIGNAL,
                                     "Sure, the hours are 9 to 5", END_SIGNAL, "", "x" * 400]
    assert all(r.error is None for r in out)


def test_prompt_beyond_the_context_fails_that_conversation_only(tok, model):
    long_task = dataclasses.replace(WRITE, hidden="many facts. " * 800)
    rec = Recorder(canned(tok, ['{"response": "fine"}']))
    sim = LLMSimulator(model, tok, generate_fn=rec)
    out = sim.reply([req(long_task, ("user", "hi")), REQUESTS[2]])
    assert out[0].text == "" and "exceeds the simulator model's context" in out[0].error
    assert out[1].text == "fine" and len(rec.calls[0][0]) == 1
    with pytest.raises(SimulatorError, match="context"):
        dataclasses.replace(sim, strict=True).reply([req(long_task, ("user", "hi"))])


def test_llm_setting_and_a_controller_run_with_the_simulator(tok, model):
    s = CToMSettings(domain="math", simulator="llm")
    with pytest.raises(ValueError, match="simulator_model"):
        make_simulator(s)
    sim = make_simulator(s, model, tok)
    assert isinstance(sim, LLMSimulator) and sim.temperature == 0.7
    sim.generate_fn = canned(tok, ['{"response": "That is wrong."}'])
    policy = ScriptedPolicy(tok, lambda ctx, kind: r"x = \boxed{9}")
    cfg = ControllerConfig.for_domain("math", mode="direct", max_rounds=2)
    [conv] = run_conversations([MATH], policy, sim, tok, cfg, key=jax.random.key(0))
    assert conv.visible[1:] == [("assistant", r"x = \boxed{9}"), ("user", "That is wrong."),
                                ("assistant", r"x = \boxed{9}")]
    assert conv.end == "budget" and conv.score == 0.0
    # the baseline loop through the real sampler too (Naive GRPO rollouts): 4-token responses
    sampled = SamplerPolicy(model, tok, temperature=1.0)
    cfg = ControllerConfig.for_domain("math", mode="direct", max_rounds=2, response_cap=4)
    convs = run_conversations([MATH, MATH], sampled, sim, tok, cfg, key=jax.random.key(1))
    for conv in convs:
        assert [r for r, _ in conv.visible] == ["user", "assistant", "user", "assistant"]
        assert all(0 < sum(seg.policy) <= 4 for seg in conv.sequences)
