"""Goal particles (MindZero Figure 7): schema, extraction, validation and normalisation.

A completion proposes N goals `{"particles": [{"object1": {"color", "shape"}, "object2": {...},
"p": float}, ...]}`. Model output is untrusted: `parse_particles` never raises on it and returns
either `Particles` or a `ParseFailure` with the reason, so a malformed completion is a normal
case with a defined reward (the caller's format penalty).

Two rules, as in the public MindZero code:
  * `mode="train"` (the reward): exactly `num_particles` entries when given, no extra keys,
    labels from the scene, object1 != object2, p a number in [0, 1], and no two particles on
    the same unordered pair -- duplicates would let a policy stack mass without proposing
    alternatives;
  * `mode="eval"` (driving the helper, scoring): case/space-insensitive labels, extra keys and
    invalid entries dropped, duplicates merged by summing p; fails only when nothing valid is
    left.
Probabilities are normalised as `q_i = max(p_i, floor) / sum_j max(p_j, floor)`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Sequence

import numpy as np

from jaxtom.gridworld.text import object_labels
from jaxtom.gridworld.types import goal_index

MODES = ("train", "eval")
DEFAULT_FLOOR = 1e-12
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_PARTICLE_KEYS = {"object1", "object2", "p"}
_OBJECT_KEYS = {"color", "shape"}
_MAX_WEIGHT = 1e100  # eval mode reads p as an unnormalised weight; sums must stay finite


@dataclasses.dataclass(frozen=True)
class Particles:
    """A valid particle set: ordered object-id pairs and normalised probabilities."""
    pairs: tuple[tuple[int, int], ...]
    q: tuple[float, ...]

    ok = True

    def __len__(self) -> int:
        return len(self.pairs)


@dataclasses.dataclass(frozen=True)
class ParseFailure:
    """Why a completion could not be used, in any domain; it earns the format penalty. It
    holds no hypotheses under either domain's names (gridworld `pairs` / `q`, household
    `goals` / `probs`)."""
    reason: str

    ok = False
    pairs: tuple = ()
    q: tuple = ()
    goals: tuple = ()
    probs: tuple = ()

    def __len__(self) -> int:
        return 0


def scene_labels(scene: Any) -> list[str]:
    """Object labels in id order from a label list, an `EnvState` or an `Observation`."""
    if isinstance(scene, (list, tuple)) and all(isinstance(s, str) for s in scene):
        return list(scene)
    if hasattr(scene, "obj_color") and hasattr(scene, "obj_shape"):
        return object_labels(scene)
    raise TypeError(f"scene must be a list of 'color shape' labels or an EnvState/Observation, "
                    f"got {type(scene).__name__}")


def extract_json(text: str) -> Any:
    """The JSON value in a completion: a ```json fence first, else first '{' to last '}'.

    Raises ValueError (caught by `parse_particles`) when there is none.
    """
    if not isinstance(text, str):
        raise ValueError(f"completion is {type(text).__name__}, not text")
    for block in _FENCE.findall(text):
        try:
            return json.loads(block)
        except (ValueError, RecursionError):
            continue
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the completion")
    try:
        return json.loads(text[start:end + 1])
    except RecursionError as err:
        raise ValueError("JSON nested too deeply") from err


def _norm(label: str) -> str:
    return " ".join(label.lower().split())


def _object_id(obj: Any, index: dict[str, int], strict: bool) -> int | str:
    """Object id, or a reason string."""
    if not isinstance(obj, dict):
        return "object is not a JSON object"
    if strict and set(obj) != _OBJECT_KEYS:
        return f"object keys {sorted(map(str, obj))} are not exactly color, shape"
    color, shape = obj.get("color"), obj.get("shape")
    if not isinstance(color, str) or not isinstance(shape, str):
        return "color and shape must be strings"
    label = f"{color} {shape}" if strict else _norm(f"{color} {shape}")
    if label not in index:
        return f"unknown object {label[:40]!r}"
    return index[label]


def finite_p(p: Any) -> float | str:
    """An answer's p as a finite float, or why it is not one (every domain's first check;
    the range rule is the domain's own)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        return "p is not a number"
    try:
        p = float(p)
    except OverflowError:
        return "p is not finite"
    if not math.isfinite(p):
        return "p is not finite"
    return p


def _probability(p: Any, strict: bool) -> float | str:
    p = finite_p(p)
    if isinstance(p, str):
        return p
    if strict and not 0.0 <= p <= 1.0:
        return "p is outside [0, 1]"
    return min(p, _MAX_WEIGHT)


def _particle(entry: Any, index: dict[str, int], strict: bool):
    """(object1, object2, p) or a reason string."""
    if not isinstance(entry, dict):
        return "particle is not a JSON object"
    if strict and set(entry) != _PARTICLE_KEYS:
        return f"particle keys {sorted(map(str, entry))[:5]} are not exactly object1, object2, p"
    if not _PARTICLE_KEYS <= set(entry):
        return "particle lacks object1, object2 or p"
    o1 = _object_id(entry["object1"], index, strict)
    o2 = _object_id(entry["object2"], index, strict)
    p = _probability(entry["p"], strict)
    for value in (o1, o2, p):
        if isinstance(value, str):
            return value
    if o1 == o2:
        return "object1 and object2 are the same object"
    return int(o1), int(o2), float(p)


def normalise(p: Sequence[float], floor: float = DEFAULT_FLOOR) -> tuple[float, ...]:
    """`max(p_i, floor) / sum`; never divides by zero."""
    arr = np.maximum(np.asarray(p, np.float64), floor)
    return tuple(float(x) for x in arr / arr.sum())


def parse_particles(text: str, scene: Any, *, mode: str = "train",
                    num_particles: int | None = None, floor: float = DEFAULT_FLOOR,
                    duplicates: str | None = None) -> Particles | ParseFailure:
    """Particles from a raw completion, or a `ParseFailure` (never raises on model output).

    `scene` names the objects (labels in id order, an `EnvState` or an `Observation`);
    `num_particles` is enforced exactly in train mode and caps the count in eval mode.
    `duplicates` overrides the mode's duplicate rule: `reject` (train default: a repeated
    unordered pair fails) or `merge` (eval default: a repeated goal adds its p; in train mode
    the merged set is then scored as fewer hypotheses, which eq. 4's entropy term already
    rewards less, instead of failing).
    Bad arguments (unknown mode, bad scene) are programming errors and do raise.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if duplicates not in (None, "reject", "merge"):
        raise ValueError(f"duplicates must be reject or merge, got {duplicates!r}")
    if num_particles is not None and num_particles < 1:
        raise ValueError(f"num_particles must be >= 1, got {num_particles}")
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    labels = scene_labels(scene)
    strict = mode == "train"
    index = {(lab if strict else _norm(lab)): i for i, lab in enumerate(labels)}
    try:
        data = extract_json(text)
    except ValueError as err:
        return ParseFailure(str(err))
    if not isinstance(data, dict) or "particles" not in data:
        return ParseFailure("no 'particles' key")
    if strict and set(data) != {"particles"}:
        return ParseFailure("extra top-level keys")
    entries = data["particles"]
    if not isinstance(entries, list) or not entries:
        return ParseFailure("'particles' is not a non-empty list")
    if strict and num_particles is not None and len(entries) != num_particles:
        return ParseFailure(f"{len(entries)} particles, expected {num_particles}")
    merged: dict[tuple[int, int], float] = {}
    for entry in entries:
        particle = _particle(entry, index, strict)
        if isinstance(particle, str):
            if strict:
                return ParseFailure(particle)
            continue
        o1, o2, p = particle
        reject = (duplicates or ("reject" if strict else "merge")) == "reject"
        if reject and ((o1, o2) in merged or (o2, o1) in merged):
            return ParseFailure("duplicate goal pair")
        merged[(o1, o2)] = merged.get((o1, o2), 0.0) + p
    if not merged:
        return ParseFailure("no valid particle")
    pairs = list(merged)
    if not strict and num_particles is not None and len(pairs) > num_particles:
        pairs = sorted(pairs, key=lambda k: -merged[k])[:num_particles]
    return Particles(tuple(pairs), normalise([merged[k] for k in pairs], floor))


def format_particles(pairs: Sequence[tuple[int, int]], probs: Sequence[float],
                     scene: Any, *, decimals: int = 2) -> str:
    """Minified Figure 7 JSON for goal pairs (object ids) -- warm-up targets and tests."""
    labels = scene_labels(scene)

    def obj(i):
        color, shape = labels[int(i)].split(" ", 1)
        return {"color": color, "shape": shape}

    particles = [{"object1": obj(a), "object2": obj(b), "p": round(float(p), decimals)}
                 for (a, b), p in zip(pairs, probs)]
    return json.dumps({"particles": particles}, separators=(",", ":"))


def to_arrays(results: Sequence[Particles | ParseFailure], num_objects: int,
              max_particles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch parsed results for the jitted reward: goal indices [B, N] (ordered-goal index,
    0 where padded), q [B, N] (0 where padded) and ok [B]."""
    B = len(results)
    goals = np.zeros((B, max_particles), np.int32)
    q = np.zeros((B, max_particles), np.float32)
    ok = np.zeros(B, bool)
    for b, r in enumerate(results):
        if not r.ok:
            continue
        if len(r.pairs) > max_particles:
            raise ValueError(f"result {b} has {len(r.pairs)} particles, max_particles is "
                             f"{max_particles}")
        ok[b] = True
        for i, ((o1, o2), qi) in enumerate(zip(r.pairs, r.q)):
            goals[b, i] = goal_index(o1, o2, num_objects)
            q[b, i] = qi
    return goals, q, ok
