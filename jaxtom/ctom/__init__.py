"""CToM (collaborative theory of mind): the draft-predict-revise controller, satisfaction
rules, effort cost, user simulators, task scores, prediction targets and metrics.

Submodules that need a model (controller, simulators_llm, train) are imported lazily by
their users; the names below are light and importable without jax work.
"""

from jaxtom.ctom.effort import (DOMAINS, DomainSettings, combined_reward, domain_settings,
                                effort_cost)
from jaxtom.ctom.metrics import (action_shares, clustered_mean_sem, clustered_sem,
                                 conversation_f1, lexical_f1, math_conversation_f1,
                                 self_revision_gain, user_effort)
from jaxtom.ctom.satisfaction import END_SIGNAL, is_satisfied, satisfaction_label
from jaxtom.ctom.scoring import extract_boxed, rouge_l_f1, score_math, score_writing

__all__ = ["DOMAINS", "DomainSettings", "END_SIGNAL", "action_shares", "clustered_mean_sem",
           "clustered_sem", "combined_reward", "conversation_f1", "domain_settings",
           "effort_cost", "extract_boxed", "is_satisfied", "lexical_f1",
           "math_conversation_f1", "rouge_l_f1", "satisfaction_label", "score_math",
           "score_writing", "self_revision_gain", "user_effort"]
