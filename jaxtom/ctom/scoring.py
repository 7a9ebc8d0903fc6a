"""Task scores of CToM appendix A.2 for math and writing (coding lives in `sandbox`).

Math: 1 if the last \\boxed{} of a visible message is equivalent to the reference, else 0;
equivalence by math-verify when installed, then a normalised-string and SymPy fallback, so a
malformed answer scores 0 rather than raising. Writing: ROUGE-L F1 on lowercased
alphanumeric tokens (LCS-based, beta = 1).
"""

from __future__ import annotations

import logging
import re
import threading

logging.getLogger("math_verify").setLevel(logging.ERROR)

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text: str | None) -> str | None:
    """Content of the last balanced \\boxed{...} (or \\fbox{...}) in `text`, or None."""
    if not text:
        return None
    found = None
    for m in _BOX.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = text[m.end():i - 1]
    return found


_STRIP = [(re.compile(p), r) for p, r in [
    (r"\\left|\\right|\\!|\\,|\\;|\\:|\\ |\$", ""), (r"\\text\{\s*([^{}]*)\}", r"\1"),
    (r"\\mathrm\{([^{}]*)\}", r"\1"), (r"\\mbox\{([^{}]*)\}", r"\1"), (r"\^\{?\\circ\}?", ""),
    (r"\\dfrac|\\tfrac", r"\\frac"), (r"\s+", ""), (r"\.$", ""), (r"^[a-zA-Z]\s*=", ""),
]]


def normalise_answer(ans: str) -> str:
    s = ans.strip()
    for pat, rep in _STRIP:
        s = pat.sub(rep, s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def _math_verify_equal(a: str, b: str) -> bool | None:
    try:
        from math_verify import parse, verify  # heavy (sympy): only math answers need it
    except ImportError:
        return None
    # math-verify's timeouts use SIGALRM, which only works on the main thread
    limit = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse(f"${b}$", parsing_timeout=limit)
        pred = parse(f"${a}$", parsing_timeout=limit)
        if not gold or not pred:
            return None
        return bool(verify(gold, pred, timeout_seconds=limit))
    except Exception:  # math-verify's own parse failures: fall back, never crash scoring
        return None


def _sympy_equal(a: str, b: str) -> bool:
    import sympy  # heavy: only math answers need it
    try:
        ea = sympy.sympify(_latex_lite(a))
        eb = sympy.sympify(_latex_lite(b))
        return bool(sympy.simplify(ea - eb) == 0)
    except Exception:
        return False


def _latex_lite(s: str) -> str:
    s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
    s = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", s)
    s = s.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*").replace("^", "**")
    return s.replace("{", "(").replace("}", ")")


def answers_equivalent(answer: str, reference: str) -> bool:
    """Whether two final answers (LaTeX, no \\boxed) are mathematically the same."""
    a, b = normalise_answer(answer), normalise_answer(reference)
    if not a or not b:
        return False
    if a == b:
        return True
    verdict = _math_verify_equal(a, b)
    if verdict is not None:
        return verdict
    return _sympy_equal(a, b)


def score_math(response: str | None, reference: str) -> float:
    """1.0 if the last \\boxed{} answer in `response` equals `reference`, else 0.0.

    `reference` may be a bare answer or a full MATH solution (its last \\boxed{} is used).
    """
    answer = extract_boxed(response)
    if answer is None:
        return 0.0
    ref = extract_boxed(reference)
    return 1.0 if answers_equivalent(answer, reference if ref is None else ref) else 0.0


_TOKEN = re.compile(r"[a-z0-9]+")


def rouge_tokens(text: str | None) -> list[str]:
    return _TOKEN.findall((text or "").lower())


def _lcs_length(a: list[str], b: list[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l_f1(candidate: str | None, reference: str | None) -> float:
    """ROUGE-L F1 = 2PR/(P+R) with P = LCS/|cand|, R = LCS/|ref|; 0 if either is empty."""
    c, r = rouge_tokens(candidate), rouge_tokens(reference)
    if not c or not r:
        return 0.0
    lcs = _lcs_length(c, r)
    if lcs == 0:
        return 0.0
    p, rec = lcs / len(c), lcs / len(r)
    return 2 * p * rec / (p + rec)


def score_writing(document: str | None, reference: str) -> float:
    return rouge_l_f1(document, reference)
