"""Size ladders: the few sizes a varying length or count is rounded up to, so that a jitted
program is compiled once per ladder rung met rather than once per size.

`bucket` (four rungs per octave, <= 25% padding) sizes what is costly to pad and cheap to
compile (the sampler's prompt chunks and caches, the update's row counts); `power_of_two`
(one rung per octave) sizes what is cheap to pad (host gathers, shared-prompt rows whose
length varies with every batch's longest group).
"""

from __future__ import annotations


def bucket(n: int, minimum: int, multiple: int = 1) -> int:
    """The smallest size >= n in minimum, then steps of a quarter of the current power of two
    (8, 10, 12, 14, 16, 20, 24, ... for minimum 8), rounded up to `multiple`.

    Padding wastes at most ~25%, and sizes up to N fall into O(log N) buckets, so the
    number of compiled programs grows with the log of the range of lengths seen.
    """
    size = max(int(minimum), 1)
    while size < n:
        size += max(1, (1 << (size.bit_length() - 1)) // 4)
    return -(-size // multiple) * multiple


def power_of_two(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= max(n, minimum) (`minimum` a power of two)."""
    if minimum < 1 or minimum & (minimum - 1):
        raise ValueError(f"power_of_two: minimum must be a power of two, got {minimum}")
    return max(int(minimum), 1 << max(int(n) - 1, 0).bit_length())
