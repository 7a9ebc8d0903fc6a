"""Shared by the controller tests: run conversations with a scripted stand-in policy on the
Llama 3 chat template, and read back the tokens under a policy-mask value."""

import jax

from jaxtom.ctom.controller import run_conversations
from jaxtom.ctom.policies import ScriptedPolicy
from jaxtom.ctom.simulators import ScriptedSimulator
from jaxtom.tokenizer import llama3_tokenizer

TOK = llama3_tokenizer()


def run_scripted(script, tasks, cfg, sim=None):
    """(conversations, policy) for `script(ctx, kind) -> text` on `tasks` under `cfg`."""
    policy = ScriptedPolicy(TOK, script)
    convs = run_conversations(tasks, policy, sim or ScriptedSimulator(), TOK, cfg,
                              key=jax.random.key(0))
    return convs, policy


def masked_text(seg, value):
    """The text of a sequence's tokens whose policy-mask entry equals `value`."""
    return TOK.decode([t for t, m in zip(seg.tokens, seg.policy) if m == value])
