"""Float32 tolerances derived from the computation, not from what one machine produced.

The model is the standard forward error bound for floating point (Higham, *Accuracy and
Stability of Numerical Algorithms*, ch. 3): a sum or dot product of `n` terms, added in ANY
order (sequential, pairwise, blocked, multithreaded, with or without FMA), is within
`n * u * sum(|terms|)` of the exact value, where `u = 2^-24` is float32's unit roundoff. A
chain of such steps adds their relative errors to first order, so the error of a result is
at most

    tol = EPS32 * reduction * depth * scale,        EPS32 = 2^-23 = 1.19e-7 = 2u

- `reduction`: the number of rounding steps one stage puts on a path from the inputs to the
  result: the length of every sum it contains (a decoder layer: `decoder_reduction`), plus
  one per elementwise op; where a function amplifies its input's error (exp of an argument of
  size `x` turns an absolute error `e` into a relative error `e`), that factor goes in too;
- `depth`: how many such stages are chained (layers; x2 for a gradient, forward + backward);
- `scale`: the magnitude of the terms summed, which for a well-conditioned result (no
  cancellation, e.g. normalised transformer activations) is the magnitude of the result:
  `max |expected|` by default. Where the result is a small difference of large terms, pass
  the terms' magnitude instead.

EPS32 is 2u, not u: comparing two float32 programs, each is within `u * n * scale` of the
exact value, so they are within `2u * n * scale` of each other; against a float64 reference
only one side errs and the same bound leaves a factor 2.

This is the deterministic worst case, linear in `n`; the typical (random-walk) error grows
like `sqrt(n)`, so on the models under test real differences sit one to two orders of
magnitude below the bound. A tolerance must hold on every machine and every summation order,
so it is the bound, not the typical size. It still catches real bugs: for the tiny test
decoders `reduction * depth` is about 1e3, i.e. 1e-4 of the logits' scale, while a wrong sign,
a missing scale factor or an off-by-one position moves logits by 1e-2 to 1 of it; tests that
can say so check that a deliberately wrong value fails the same comparison (`is_close`).

The bound assumes float32 arithmetic: accelerators that run float32 matmuls in TF32 or
bfloat16 by default need `jax_default_matmul_precision="highest"` for it to hold.
"""

from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 2^-23


def float32_tol(scale, reduction: int, depth: int = 1) -> float:
    """`EPS32 * reduction * depth * scale`: the bound on float32 rounding in a result of
    magnitude `scale` after `depth` chained stages of `reduction` rounding steps each (see
    the module docstring)."""
    if reduction < 1 or depth < 1:
        raise ValueError(f"reduction and depth must be >= 1, got {reduction}, {depth}")
    scale = float(scale)
    if not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be finite and >= 0, got {scale}")
    return EPS32 * reduction * depth * scale


def _tol(actual, expected, reduction, depth, scale):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shapes differ: {actual.shape} vs {expected.shape}")
    if scale is None:
        scale = np.abs(expected).max() if expected.size else 0.0
    diff = float(np.abs(actual - expected).max()) if expected.size else 0.0
    if not np.all(np.isfinite(actual)):
        diff = float("inf")
    return diff, float(scale), float32_tol(scale, reduction, depth)


def is_close(actual, expected, *, reduction: int, depth: int = 1, scale=None) -> bool:
    """Whether `max |actual - expected| <= float32_tol(scale, reduction, depth)`, with
    `scale = max |expected|` unless given."""
    diff, _, tol = _tol(actual, expected, reduction, depth, scale)
    return diff <= tol


def assert_close(actual, expected, *, reduction: int, depth: int = 1, scale=None,
                 err_msg: str = "") -> float:
    """Asserts `max |actual - expected| <= float32_tol(scale, reduction, depth)` (`scale =
    max |expected|` unless given); returns the tolerance, so a test can check that a
    deliberately wrong value exceeds it."""
    diff, scale, tol = _tol(actual, expected, reduction, depth, scale)
    if not diff <= tol:
        raise AssertionError(
            f"max |actual - expected| = {diff:.3g} > tol {tol:.3g} = eps {EPS32:.3g} x "
            f"reduction {reduction} x depth {depth} x scale {scale:.3g}"
            + (f": {err_msg}" if err_msg else ""))
    return tol


def decoder_reduction(cfg, seq_len: int) -> int:
    """Rounding steps one pre-norm decoder layer puts on a path to its output: the sums of
    the input RMSNorm (hidden), q/k/v projections (hidden), q/k RMSNorm (head_dim, when the
    family has it), scores (head_dim), the softmax normaliser and the weighted sum of values
    (seq_len each), o_proj (heads x head_dim), the post-attention RMSNorm and gate/up
    (hidden each), down (intermediate), plus the two residual adds."""
    h, d = cfg.hidden_size, cfg.head_dim
    return (4 * h + (2 if cfg.qk_norm else 1) * d + 2 * seq_len + cfg.num_heads * d
            + cfg.intermediate_size + 2)


def decoder_depth(cfg) -> int:
    """Stages of a decoder forward to the logits: its layers, plus the final RMSNorm and
    lm_head (2 x hidden <= one layer's reduction) counted as one more."""
    return cfg.num_layers + 1
