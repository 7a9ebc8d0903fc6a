"""Household goal particles (MindZero Figure 9): schema, lenient parser and formatter.

A completion proposes n goals
`{"particles": [{"task_name", "objects": [{"type", "count"}], "target": {"type"}, "p"}, ...]}`.
Model output is untrusted: `parse_particles(text, ...)` never raises on it and returns either
`HouseholdParticles(goals, probs)` or MindZero's one `ParseFailure(reason)`
(`jaxtom.mindzero.particles`; it earns the reward's format penalty).

Lenient about the form:
  * the JSON is taken from a ```json fence, the whole text or its outermost braces, else
    from the first object holding "particles" among prose or other JSON (an echoed schema);
    minified or pretty, trailing commas are fine;
  * keys are matched case-, space-, hyphen- and underscore-insensitively, with a few
    unambiguous synonyms (task / task_name, objects / items, type / name, count / number /
    quantity, target / location, p / prob / probability); a target may be a bare string;
    two keys of one entry naming the same field are ambiguous (the entry is invalid);
  * names are matched ignoring case, spaces, underscores and a plural "s"/"es"
    ("Cutlery Forks" -> cutleryfork); counts may be integral floats or digit strings;
  * a JSON object repeating a key with different values is ambiguous (invalid);
  * a list wrapped around the object (`[{...}]`) uses its last object, as json_repair does.
Strict about the content (per entry): a known task, object types and target (an unknown one
is named in the reason), counts 1..`max_count`, at least one object, p a finite number in
[0, 1] (eval mode: any finite p >= 0, read as a weight).

Modes, as in the public reward (`compute_score_prr_v3`):
  * `mode="train"`: any invalid entry fails the whole completion; duplicate goals (same task,
    objects and target; object order and repeats inside one goal do not matter) are merged
    by summing p (or, with `duplicates="reject"`, fail it), and then exactly
    `num_particles` goals are required (None: any number);
  * `mode="eval"`: invalid entries are dropped (their reasons kept in `dropped`), duplicates
    merged, the `num_particles` most probable kept; fails only when nothing valid is left.
More than `max_entries` (default 1000) entries fail at once. Probabilities are normalised as
`q_i = max(p_i, floor) / sum_j max(p_j, floor)` (all zero -> uniform, never a division by
zero and never an all-zero q that would score 0 in the ELBO).

`format_particles(goals, probs)` writes minified Figure 9 JSON (warm-up targets);
`to_arrays(results, max_particles)` pads parsed results into q [B, N] / ok [B] arrays and
goal lists for `jaxtom.mindzero.household.reward`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Sequence

import numpy as np

from jaxtom.household.catalog import GOAL_OBJECT_TYPES, TARGETS, TASKS
from jaxtom.household.goals import Goal
from jaxtom.mindzero.particles import ParseFailure, finite_p

MODES = ("train", "eval")
DEFAULT_FLOOR = 1e-12  # q floor of `normalise`, as the gridworld's parser
DEFAULT_NUM_PARTICLES = 10  # Figure 9 / the public reward's N_PARTICLES
MAX_COUNT = 64  # a count above this is not a household goal (and would stall a planner)
MAX_ENTRIES = 1000
_MAX_WEIGHT = 1e100
_MAX_DECODE_TRIES = 64  # '{' positions tried when the JSON sits among prose (bounds the work)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")

# canonical field -> accepted spellings (after _key normalisation)
_PARTICLE_FIELDS = {"task_name": ("task_name", "taskname", "task", "task_type", "tasktype"),
                    "objects": ("objects", "object", "items", "object_list"),
                    "target": ("target", "target_location", "location", "destination"),
                    "p": ("p", "prob", "probability", "weight")}
_OBJECT_FIELDS = {"type": ("type", "name", "object", "object_type", "kind", "class"),
                  "count": ("count", "number", "num", "quantity", "n", "amount")}
_TARGET_FIELDS = {"type": ("type", "name", "target", "location", "object", "class")}


__all__ = ["HouseholdParticles", "parse_particles", "format_particles",
           "extract_particles_json", "to_arrays", "MODES", "DEFAULT_NUM_PARTICLES"]


@dataclasses.dataclass(frozen=True)
class HouseholdParticles:
    """A valid particle set: distinct goals and their normalised probabilities. `dropped`:
    reasons for entries skipped in eval mode."""
    goals: tuple[Goal, ...]
    probs: tuple[float, ...]
    dropped: tuple[str, ...] = ()

    ok = True

    def __len__(self) -> int:
        return len(self.goals)


def normalise(p: Sequence[float], floor: float = DEFAULT_FLOOR) -> tuple[float, ...]:
    """`max(p_i, floor) / sum`; never divides by zero."""
    arr = np.maximum(np.asarray(p, np.float64), floor)
    return tuple(float(x) for x in arr / arr.sum())


class _Ambiguous(ValueError):
    pass


def _pairs_hook(pairs):
    out: dict = {}
    for k, v in pairs:
        if k in out and out[k] != v:
            raise _Ambiguous(f"key {str(k)[:30]!r} repeated with different values")
        out[k] = v
    return out


def _loads(text: str):
    return json.loads(text, object_pairs_hook=_pairs_hook)


def _candidates(text: str):
    """JSON texts to try, best first: fences, the whole text, then each '{' to the end
    (decoded with raw_decode) and first '{' .. last '}'."""
    yield from _FENCE.findall(text)
    yield text
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        yield text[start:end + 1]


def _has_particles(value) -> bool:
    return isinstance(value, dict) and any(_key(k) in _PARTICLE_LIST_KEYS for k in value)


_PARTICLE_LIST_KEYS = ("particles", "hypotheses", "goals")


def extract_particles_json(text: str) -> Any:
    """The JSON value holding the particles (else the first JSON value found), or a
    ValueError saying why there is none."""
    if not isinstance(text, str):
        raise ValueError(f"completion is {type(text).__name__}, not text")
    first_error, fallback = None, None
    seen = set()
    for candidate in _candidates(text):
        for body in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
            if body in seen:
                continue
            seen.add(body)
            try:
                value = _loads(body)
            except _Ambiguous as err:
                raise ValueError(f"ambiguous JSON: {err}") from None
            except (ValueError, RecursionError) as err:
                first_error = first_error or err
                continue
            if isinstance(value, list):
                dicts = [v for v in value if isinstance(v, dict)]
                value = dicts[-1] if dicts else value
            if _has_particles(value):
                return value
            fallback = value if fallback is None else fallback
    # prose around several objects (an echoed schema, then the answer): decode from each '{'
    decoder = json.JSONDecoder(object_pairs_hook=_pairs_hook)
    for n, m in enumerate(re.finditer(r"\{", text)):
        if n >= _MAX_DECODE_TRIES:
            break
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except _Ambiguous as err:
            raise ValueError(f"ambiguous JSON: {err}") from None
        except (ValueError, RecursionError):
            continue
        if _has_particles(value):
            return value
    if fallback is not None:
        return fallback
    if isinstance(first_error, RecursionError):
        raise ValueError("JSON nested too deeply")
    if first_error is not None and "{" in text:
        raise ValueError(f"no decodable JSON object in the completion "
                         f"({str(first_error)[:80]})")
    raise ValueError("no JSON object in the completion")


def _key(k) -> str:
    return re.sub(r"[\s\-_]+", "_", str(k).strip().lower()).strip("_")


def _fields(entry: dict, spec: dict[str, tuple[str, ...]], what: str):
    """{canonical: value} or a reason string (ambiguous duplicate spellings)."""
    out: dict[str, Any] = {}
    for k, v in entry.items():
        nk = _key(k)
        for field, names in spec.items():
            if nk in names:
                if field in out:
                    return f"{what} names {field!r} twice"
                out[field] = v
    return out


def _name(value, allowed: Sequence[str]) -> str | None:
    if not isinstance(value, str):
        return None
    flat = re.sub(r"[^a-z0-9]", "", value.lower())
    if flat in allowed:
        return flat
    for suffix in ("es", "s"):
        if flat.endswith(suffix) and flat[:-len(suffix)] in allowed:
            return flat[:-len(suffix)]
    return None


def _task(value) -> str | None:
    if not isinstance(value, str):
        return None
    flat = re.sub(r"[\s\-]+", "_", value.strip().lower())
    return flat if flat in TASKS else None


def _count(value, max_count: int) -> int | str:
    if isinstance(value, bool):
        return "count is not a number"
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 10:
        value = int(value.strip())
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return f"count {value!r} is not a whole number"
        value = int(value)
    if not isinstance(value, int):
        return "count is not a number"
    if not 1 <= value <= max_count:
        return f"count {value} is outside 1..{max_count}"
    return value


def _probability(value, strict: bool) -> float | str:
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%")) / (100 if value.strip().endswith("%")
                                                        else 1)
        except ValueError:
            return "p is not a number"
    value = finite_p(value)
    if isinstance(value, str):
        return value
    if value < 0 or (strict and value > 1):
        return f"p {value!r} is outside [0, 1]"
    return min(value, _MAX_WEIGHT)


def _goal(entry, max_count: int, strict: bool) -> tuple[Goal, float] | str:
    """(goal, p) or the reason the entry is invalid."""
    if not isinstance(entry, dict):
        return "particle is not a JSON object"
    fields = _fields(entry, _PARTICLE_FIELDS, "particle")
    if isinstance(fields, str):
        return fields
    missing = [f for f in _PARTICLE_FIELDS if f not in fields]
    if missing:
        return f"particle lacks {', '.join(missing)}"
    task = _task(fields["task_name"])
    if task is None:
        return f"unknown task {str(fields['task_name'])[:40]!r}"
    target = fields["target"]
    if isinstance(target, dict):
        tf = _fields(target, _TARGET_FIELDS, "target")
        if isinstance(tf, str):
            return tf
        if "type" not in tf:
            return "target lacks type"
        target = tf["type"]
    target_name = _name(target, TARGETS)
    if target_name is None:
        return f"unknown target {str(target)[:40]!r}"
    objects = fields["objects"]
    if isinstance(objects, dict):
        objects = [objects]
    if not isinstance(objects, list) or not objects:
        return "objects is not a non-empty list"
    if len(objects) > len(GOAL_OBJECT_TYPES) * 4:
        return f"{len(objects)} objects in one goal"
    pairs = []
    for obj in objects:
        if not isinstance(obj, dict):
            return "object is not a JSON object"
        of = _fields(obj, _OBJECT_FIELDS, "object")
        if isinstance(of, str):
            return of
        if "type" not in of or "count" not in of:
            return "object lacks type or count"
        kind = _name(of["type"], GOAL_OBJECT_TYPES)
        if kind is None:
            return f"unknown object type {str(of['type'])[:40]!r}"
        count = _count(of["count"], max_count)
        if isinstance(count, str):
            return f"{kind}: {count}"
        pairs.append((kind, count))
    total: dict[str, int] = {}
    for kind, count in pairs:
        total[kind] = total.get(kind, 0) + count
    if max(total.values()) > max_count:
        return f"count of {max(total, key=total.get)} is above {max_count}"
    p = _probability(fields["p"], strict)
    if isinstance(p, str):
        return p
    return Goal.make(task, total, target_name), p


def parse_particles(text: str, *, mode: str = "train",
                    num_particles: int | None = DEFAULT_NUM_PARTICLES,
                    floor: float = DEFAULT_FLOOR, max_count: int = MAX_COUNT,
                    max_entries: int = MAX_ENTRIES,
                    duplicates: str = "merge") -> HouseholdParticles | ParseFailure:
    """Household particles from a raw completion, or a `ParseFailure` (never raises on model
    output; bad arguments do raise). See the module docstring for the rules. `duplicates`
    (`mindzero.reward.duplicates`, as the gridworld's parser reads it): `merge` (both modes'
    default, the public reward) sums a repeated goal's p; `reject` fails the completion."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if duplicates not in ("reject", "merge"):
        raise ValueError(f"duplicates must be reject or merge, got {duplicates!r}")
    if num_particles is not None and num_particles < 1:
        raise ValueError(f"num_particles must be >= 1 or None, got {num_particles}")
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    if max_count < 1 or max_entries < 1:
        raise ValueError(f"max_count and max_entries must be >= 1, got {max_count}, "
                         f"{max_entries}")
    strict = mode == "train"
    try:
        data = extract_particles_json(text)
    except ValueError as err:
        return ParseFailure(str(err))
    if not isinstance(data, dict):
        return ParseFailure("the JSON is not an object")
    keys = [k for k in data if _key(k) in _PARTICLE_LIST_KEYS]
    if len(keys) != 1:
        return ParseFailure("no 'particles' key" if not keys else "several particle lists")
    entries = data[keys[0]]
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        return ParseFailure("'particles' is not a non-empty list")
    if len(entries) > max_entries:
        return ParseFailure(f"{len(entries)} particles, more than {max_entries}")
    merged: dict[Goal, float] = {}
    dropped = []
    for i, entry in enumerate(entries):
        try:
            parsed = _goal(entry, max_count, strict)
        except (ValueError, TypeError) as err:  # defensive: Goal.make's own checks
            parsed = str(err)[:80]
        if isinstance(parsed, str):
            if strict:
                return ParseFailure(f"particle {i}: {parsed}")
            dropped.append(f"particle {i}: {parsed}")
            continue
        goal, p = parsed
        if goal in merged and duplicates == "reject":
            return ParseFailure(f"particle {i}: a duplicate goal")
        merged[goal] = min(merged.get(goal, 0.0) + p, _MAX_WEIGHT)
    if not merged:
        return ParseFailure(f"no valid particle ({dropped[0]})" if dropped
                            else "no valid particle")
    goals = list(merged)
    if strict and num_particles is not None and len(goals) != num_particles:
        return ParseFailure(f"{len(goals)} distinct particles, expected {num_particles}")
    if not strict and num_particles is not None and len(goals) > num_particles:
        goals = sorted(goals, key=lambda g: -merged[g])[:num_particles]
    return HouseholdParticles(tuple(goals), normalise([merged[g] for g in goals], floor),
                              tuple(dropped))


def format_particles(goals: Sequence[Goal], probs: Sequence[float], *,
                     decimals: int = 2) -> str:
    """Minified Figure 9 JSON for goals with probabilities (warm-up targets, tests)."""
    if len(goals) != len(probs):
        raise ValueError(f"{len(goals)} goals but {len(probs)} probabilities")
    particles = [{**g.to_json(), "p": round(float(p), decimals)} for g, p in zip(goals, probs)]
    return json.dumps({"particles": particles}, separators=(",", ":"))


def to_arrays(results: Sequence[HouseholdParticles | ParseFailure], max_particles: int
              ) -> tuple[list[tuple[Goal, ...]], np.ndarray, np.ndarray]:
    """(goals per sample, q [B, N] float64 with 0 on padding, ok [B]) for the reward; a
    failure has no goals and ok False."""
    B = len(results)
    q = np.zeros((B, max_particles), np.float64)
    ok = np.zeros(B, bool)
    goals: list[tuple[Goal, ...]] = []
    for b, r in enumerate(results):
        if not r.ok:
            goals.append(())
            continue
        if len(r.goals) > max_particles:
            raise ValueError(f"result {b} has {len(r.goals)} particles, max_particles is "
                             f"{max_particles}")
        ok[b] = True
        goals.append(tuple(r.goals))
        q[b, :len(r.probs)] = r.probs
    return goals, q, ok
