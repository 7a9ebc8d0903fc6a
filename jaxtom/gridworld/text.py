"""Text observations and prompts for the Construction gridworld, worded exactly as MindZero.

- `render_text` is the textual transcript of appendix E.3 (Figure 11): the intro paragraph,
  agents, obstacles, objects with coordinates, action deltas, the human's actions and positions
  so far, and an ASCII map (top row y = H-1; objects by id, `H` human, `P` helper, `#` walls).
- `qa_prompt` (Figure 6) and `assistance_prompt` (Figure 7) wrap the same intro with a question
  or a particle request. The observation is pluggable: `modality="image"` puts the `<image>`
  token first (the picture is passed separately), `modality="text"` inserts the transcript
  after the intro and names object coordinates in the question, as Figure 11 does.

The paper's listings are typeset with curly quotes; the strings here use the straight quotes a
program writes (as in the public MindZero prompt templates). Everything runs on the host.
"""

from __future__ import annotations

import numpy as np

from jaxtom.gridworld.types import (
    ACTION_DELTAS, ACTION_NAMES, ASCII_FREE, ASCII_HELPER, ASCII_HUMAN, ASCII_WALL, COLORS, SHAPES,
)

IMAGE_TOKEN = "<image>"
MODALITIES = ("text", "image")

INTRO = (
    "You are a helper agent in a GridWorld environment. You are the red robot, and the Human is "
    "the green robot. There are multiple objects: {objects}. The Human's goal is to place two of "
    "the objects next to each other. The Human can move up, down, left, right, or stay, and can "
    "pick up an object when standing on it and not holding one, and can put down an object when "
    "holding one and the cell is empty. The Human's action trajectory so far is shown in the "
    "image.")

# QA questions (appendix B.2): type 1 and 2 before the pick, type 3 while carrying.
QUESTIONS = {
    "pick": "Given that the Human intends to place an object next to the {condition}, which "
            "object is the Human more likely to pick up next?",
    "place": "Given that the Human intends to pick up the {condition}, which object is the Human "
             "more likely to place an object next to?",
    "place_carried": "Given that the Human is holding the {condition}, which object is the "
                     "Human more likely to place the carried object next to?",
}
QUESTION_KINDS = tuple(QUESTIONS)
QA_INSTRUCTION = "Please respond with only a single lower case letter a or b."

PARTICLE_REQUEST = (
    "Please propose a probability distribution that includes {num_particles} candidate paired "
    "goals and their probabilities. Your response should include the probability distribution "
    "formatted according to this JSON schema: {schema}.")
GOAL_PARTICLES_SCHEMA = (
    '{"$defs": {"GoalParticle": {"properties": {"object1": {"$ref": "#/$defs/Object"}, '
    '"object2": {"$ref": "#/$defs/Object"}, "p": {"description": "Probability of the goal '
    'proposal", "maximum": 1, "minimum": 0, "title": "P", "type": "number"}}, "required": '
    '["object1", "object2", "p"], "title": "GoalParticle", "type": "object"}, "Object": '
    '{"properties": {"color": {"title": "Color", "type": "string"}, "shape": {"title": "Shape", '
    '"type": "string"}}, "required": ["color", "shape"], "title": "Object", "type": "object"}}, '
    '"properties": {"particles": {"items": {"$ref": "#/$defs/GoalParticle"}, "title": '
    '"Particles", "type": "array"}}, "required": ["particles"], "title": "GoalParticles", '
    '"type": "object"}')
NEAREST_FIRST_NOTE = (
    "Note that the Human (green robot) consistently prioritizes picking up the object closest "
    "to its initial starting position first, subsequently placing it next to the object that "
    "was initially further away. In your JSON response, ensure that for every GoalParticle, "
    "object1 is strictly the object closer to the Human (green robot)'s starting position, and "
    "object2 is the object further from it.")
ASSISTANCE_INSTRUCTION = "Please output the minified JSON."

# Figure 11 lists the deltas in this order (moves first), not in action-id order.
_DELTA_ORDER = ("up", "down", "left", "right", "stay", "pick", "put")


# --- small formatters -----------------------------------------------------------------------
def object_label(color_id: int, shape_id: int) -> str:
    """'brown star': the name objects go by in every prompt."""
    color_id, shape_id = int(color_id), int(shape_id)
    if not 0 <= color_id < len(COLORS):
        raise ValueError(f"color id {color_id} out of range; expected 0..{len(COLORS) - 1}")
    if not 0 <= shape_id < len(SHAPES):
        raise ValueError(f"shape id {shape_id} out of range; expected 0..{len(SHAPES) - 1}")
    return f"{COLORS[color_id]} {SHAPES[shape_id]}"


def _xy(pos) -> str:
    x, y = (int(v) for v in np.asarray(pos).reshape(2))
    return f"({x}, {y})"


def _english_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b, and c' (the paper's serial comma)."""
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def _host(state):
    """Host copies of the fields every text needs, from an `EnvState` or an `Observation`."""
    walls = state.layout.walls if hasattr(state, "layout") else getattr(state, "walls", None)
    if walls is None:
        raise ValueError(f"expected an EnvState or Observation, got {type(state).__name__}")
    walls = np.asarray(walls, bool)
    if walls.ndim != 2:
        raise ValueError(f"text describes one state: walls must be [H, W], got shape {walls.shape}")
    return {
        "walls": walls, "obj_pos": np.asarray(state.obj_pos),
        "obj_color": np.asarray(state.obj_color), "obj_shape": np.asarray(state.obj_shape),
        "human_pos": np.asarray(state.human_pos),
        "helper_pos": np.asarray(state.helper_pos),
        "time": int(state.time),
    }


def object_labels(state) -> list[str]:
    """Labels of the state's objects in id order (ids are the digits of the ASCII map)."""
    s = _host(state)
    return [object_label(c, k) for c, k in zip(s["obj_color"], s["obj_shape"])]


def describe_object(state, object_id: int, *, with_position: bool = False) -> str:
    """'purple star', or 'purple star at (3, 7)' (text modality, Figure 11)."""
    s = _host(state)
    count = len(s["obj_color"])
    if not 0 <= int(object_id) < count:
        raise ValueError(f"object id {object_id} out of range; expected 0..{count - 1}")
    label = object_label(s["obj_color"][object_id], s["obj_shape"][object_id])
    return f"{label} at {_xy(s['obj_pos'][object_id])}" if with_position else label


def intro(labels: list[str]) -> str:
    """The paragraph every GridWorld prompt starts with."""
    return INTRO.format(objects=_english_list(list(labels)))


# --- the transcript (Figure 11) ------------------------------------------------------------
def ascii_map(state) -> str:
    """Rows top (y = H-1) to bottom, cells separated by spaces; agents hide what they stand on,
    the human in front of the helper. `layout.parse_ascii` reads it back."""
    s = _host(state)
    height, width = s["walls"].shape
    grid = np.where(s["walls"], ASCII_WALL, ASCII_FREE).astype(object)
    for object_id, (x, y) in enumerate(s["obj_pos"].tolist()):
        grid[y, x] = str(object_id)
    for char, key in ((ASCII_HELPER, "helper_pos"), (ASCII_HUMAN, "human_pos")):
        x, y = s[key].tolist()
        grid[y, x] = char
    return "\n".join(" ".join(grid[y]) for y in range(height - 1, -1, -1))


def _history(state, trajectory) -> tuple[list[int], list[str]]:
    """The human's first t actions and the position after each (t = state.time)."""
    s = _host(state)
    t = s["time"]
    if t == 0:
        return [], []
    if trajectory is None:
        raise ValueError(f"state is at step {t}; a Trajectory of the actions so far is needed")
    actions = np.asarray(trajectory.action)
    if actions.ndim != 1:
        raise ValueError(f"text describes one trajectory: action must be [T], got {actions.shape}")
    if t > actions.shape[0] or not np.asarray(trajectory.valid)[:t].all():
        raise ValueError(f"state is at step {t} but the trajectory has only "
                         f"{int(np.asarray(trajectory.valid).sum())} valid steps")
    before = np.asarray(trajectory.human_pos)  # position before each action
    if t < before.shape[0] and not np.array_equal(before[t], s["human_pos"]):
        raise ValueError(f"trajectory puts the human at {_xy(before[t])} after step {t}, but the "
                         f"state has {_xy(s['human_pos'])}; pass the state reached at step {t}")
    after = [_xy(p) for p in before[1:t]] + [_xy(s["human_pos"])]
    return [int(a) for a in actions[:t]], after


def _dict_text(pairs) -> str:
    return "{" + ", ".join(f"'{key}': {value}" for key, value in pairs) + "}"


def state_details(state, trajectory=None) -> str:
    """The 'State and trajectory details:' block of Figure 11 at step t = `state.time`.

    `state` is the `EnvState`/`Observation` reached after t steps; `trajectory` is the
    episode's `Trajectory` (its first t actions are described; not needed at t = 0).
    """
    s = _host(state)
    actions, positions = _history(state, trajectory)
    obstacles = "[" + ", ".join(_xy((x, y)) for y, x in zip(*np.nonzero(s["walls"]))) + "]"
    objects = _dict_text(zip(object_labels(state), (_xy(p) for p in s["obj_pos"])))
    deltas = _dict_text((name, _xy(ACTION_DELTAS[ACTION_NAMES.index(name)]))
                        for name in _DELTA_ORDER)
    moves = "; ".join(f"t={i + 1}: {ACTION_NAMES[a]} {_xy(ACTION_DELTAS[a])}"
                      for i, a in enumerate(actions))
    visited = "; ".join(f"t={i + 1}: {p}" for i, p in enumerate(positions))
    return "\n".join([
        "State and trajectory details:",
        "Agents:",
        f"- Human pos: {_xy(s['human_pos'])}",
        f"- Helper pos: {_xy(s['helper_pos'])}",
        "Obstacles:",
        obstacles,
        "Objects (by label):",
        objects,
        "Action deltas (dx, dy):",
        deltas,
        "Action trajectory (human, name + delta):",
        moves,
        "Action trajectory (human positions):",
        visited,
        "ASCII state:",
        f"Step {s['time']}",
        ascii_map(state),
    ])


def context(labels: list[str], request: str = "", details: str | None = None) -> str:
    """The prompt context: intro + request, with the observation plugged in — the `<image>`
    token first when `details` is None (Figures 6, 7), else the transcript block after the
    intro (Figure 11)."""
    head = intro(labels)
    if details is None:
        return " ".join(part for part in (IMAGE_TOKEN, head, request) if part)
    return "\n\n".join(part for part in (head, details, request) if part)


def render_text(state, trajectory=None, question: str = "") -> str:
    """The full textual transcript of Figure 11 at step `state.time`, optionally followed by a
    question."""
    return context(object_labels(state), question, state_details(state, trajectory))


# --- prompts (Figures 6 and 7) -------------------------------------------------------------
def _check_modality(modality: str) -> str:
    if modality not in MODALITIES:
        raise ValueError(f"unknown modality {modality!r}; expected one of {MODALITIES}")
    return modality


def qa_question(state, kind: str, condition: int, options: tuple[int, int], *,
                with_positions: bool = False) -> str:
    """A binary-choice question about object ids: `condition` is the known object (target for
    'pick', picked object for 'place', held object for 'place_carried'), `options` the
    choices (a) and (b) in order."""
    if kind not in QUESTIONS:
        raise ValueError(f"unknown question kind {kind!r}; expected one of {QUESTION_KINDS}")
    options = tuple(int(o) for o in options)
    if len(options) != 2 or options[0] == options[1] or int(condition) in options:
        raise ValueError(f"options must be two distinct object ids other than the condition "
                         f"{condition}, got {options}")
    name = lambda i: describe_object(state, i, with_position=with_positions)  # noqa: E731
    question = QUESTIONS[kind].format(condition=name(int(condition)))
    return f"{question} (a) {name(options[0])}. (b) {name(options[1])}."


def qa_prompt(state, trajectory, kind: str, condition: int, options: tuple[int, int], *,
              modality: str = "text") -> str:
    """The GridWorld QA prompt (Figure 6): context, question and the answer instruction."""
    text = _check_modality(modality) == "text"
    question = qa_question(state, kind, condition, options, with_positions=text)
    details = state_details(state, trajectory) if text else None
    return context(object_labels(state), question, details) + " " + QA_INSTRUCTION


def assistance_prompt(state, trajectory, num_particles: int, *, modality: str = "text") -> str:
    """The proactive-assistance prompt (Figure 7): context, the GoalParticles JSON schema, the
    nearest-object-first note and the output instruction."""
    text = _check_modality(modality) == "text"
    if int(num_particles) < 1:
        raise ValueError(f"num_particles must be >= 1, got {num_particles}")
    request = PARTICLE_REQUEST.format(num_particles=int(num_particles),
                                      schema=GOAL_PARTICLES_SCHEMA)
    details = state_details(state, trajectory) if text else None
    body = context(object_labels(state), request, details)
    return f"{body}\n\n{NEAREST_FIRST_NOTE}\n{ASSISTANCE_INSTRUCTION}"


__all__ = ["render_text", "state_details", "ascii_map", "context", "intro", "object_label",
           "object_labels", "describe_object", "qa_question", "qa_prompt", "assistance_prompt",
           "IMAGE_TOKEN", "MODALITIES", "QUESTION_KINDS", "QA_INSTRUCTION",
           "GOAL_PARTICLES_SCHEMA", "NEAREST_FIRST_NOTE", "ASSISTANCE_INSTRUCTION"]
