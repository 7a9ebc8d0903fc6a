"""Interaction cost (CToM eq. 3), the combined reward (eq. 4) and the per-domain settings
of table 4, in one place so configs and evaluation read the same numbers."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DomainSettings:
    """Table 4 of the paper (all lengths in policy-tokenizer tokens)."""
    name: str
    max_rounds: int  # N: maximum visible assistant rounds
    user_budget: int  # B_u: per-turn maximum user tokens
    assistant_budget: int  # B_a: per-turn maximum visible assistant tokens
    draft_cap: int
    prediction_cap: int
    revision_cap: int
    baseline_output_cap: int  # Prompting Base / Naive GRPO output limit
    max_revisions: int = 3  # K_max
    simulator_temperature: float = 0.7
    assistant_temperature: float = 1.0


DOMAINS: dict[str, DomainSettings] = {
    "math": DomainSettings("math", 4, 332, 1024, 2048, 384, 2048, 9728),
    "coding": DomainSettings("coding", 6, 2000, 600, 1024, 384, 1024, 5632),
    "writing": DomainSettings("writing", 6, 2000, 900, 1536, 256, 1536, 7168),
    # this project's CPU task (jaxtom.ctom.packing), sized for its tiny BPE: N = 2 visible
    # rounds; B_u holds the opening request and one reply, B_a two lists of four labelled
    # items and a closing tag; the baseline cap is the CToM round's combined caps
    "packing": DomainSettings("packing", 2, 16, 20, 10, 12, 10, 10 + 2 * (12 + 10) + 12,
                              max_revisions=2),
}

ALPHA, BETA = 0.5, 0.4
W_TASK, W_EFFORT = 1.0, 0.01


def domain_settings(domain: str) -> DomainSettings:
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {sorted(DOMAINS)}")
    return DOMAINS[domain]


def effort_cost(n_user_turns: int, user_tokens: int, assistant_tokens: int, *, N: int,
                B_u: int, B_a: int, alpha: float = ALPHA, beta: float = BETA) -> float:
    """C = alpha n/N + (1-alpha-beta) min(1, l_u/B_u) + beta min(1, l_a/B_a)  (eq. 3).

    `n_user_turns` counts the visible user messages (we include the opening request, so
    n/N lies in [1/N, 1] for a conversation of at most N rounds); token counts are totals
    over the conversation's visible messages. Hidden drafts and predictions never count.
    """
    if N <= 0 or B_u <= 0 or B_a <= 0:
        raise ValueError(f"N, B_u and B_a must be positive, got N={N}, B_u={B_u}, B_a={B_a}")
    if alpha < 0 or beta < 0 or alpha + beta > 1 + 1e-12:
        raise ValueError(f"need alpha, beta >= 0 and alpha + beta <= 1; got {alpha}, {beta}")
    if min(n_user_turns, user_tokens, assistant_tokens) < 0:
        raise ValueError("turn and token counts must be non-negative")
    return (alpha * n_user_turns / N + (1 - alpha - beta) * min(1.0, user_tokens / B_u)
            + beta * min(1.0, assistant_tokens / B_a))


def combined_reward(task_score: float, effort: float, *, w_task: float = W_TASK,
                    w_effort: float = W_EFFORT) -> float:
    """R = w_task R_task - w_effort C_effort  (eq. 4)."""
    return w_task * task_score - w_effort * effort
