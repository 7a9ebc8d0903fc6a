import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.gridworld import env, text
from jaxtom.gridworld.inference import trajectory_step
from jaxtom.gridworld.layout import parse_ascii
from jaxtom.gridworld.types import COLORS, DOWN, LEFT, PICK, RIGHT, SHAPES, STAY, UP, EnvParams, observe

from .conftest import unbatch

PARAMS = EnvParams()

# The scene of the paper's Figure 11 (appendix E.3): eight stars, no walls, the human started
# at (8, 3) and went left, down, down, left; the helper stayed at (0, 0).
FIG11_COLORS = ("brown", "orange", "yellow", "pink", "green", "red", "purple", "blue")
FIG11_CELLS = ((5, 9), (8, 2), (4, 0), (9, 1), (5, 5), (3, 3), (3, 7), (2, 8))
FIG11_ACTIONS = (LEFT, DOWN, DOWN, LEFT)

FIG11_TEXT = """\
You are a helper agent in a GridWorld environment. You are the red robot, and the Human is the green robot. There are multiple objects: brown star, orange star, yellow star, pink star, green star, red star, purple star, and blue star. The Human's goal is to place two of the objects next to each other. The Human can move up, down, left, right, or stay, and can pick up an object when standing on it and not holding one, and can put down an object when holding one and the cell is empty. The Human's action trajectory so far is shown in the image.

State and trajectory details:
Agents:
- Human pos: (6, 1)
- Helper pos: (0, 0)
Obstacles:
[]
Objects (by label):
{'brown star': (5, 9), 'orange star': (8, 2), 'yellow star': (4, 0), 'pink star': (9, 1), 'green star': (5, 5), 'red star': (3, 3), 'purple star': (3, 7), 'blue star': (2, 8)}
Action deltas (dx, dy):
{'up': (0, 1), 'down': (0, -1), 'left': (-1, 0), 'right': (1, 0), 'stay': (0, 0), 'pick': (0, 0), 'put': (0, 0)}
Action trajectory (human, name + delta):
t=1: left (-1, 0); t=2: down (0, -1); t=3: down (0, -1); t=4: left (-1, 0)
Action trajectory (human positions):
t=1: (7, 3); t=2: (7, 2); t=3: (7, 1); t=4: (6, 1)
ASCII state:
Step 4
. . . . . 0 . . . .
. . 7 . . . . . . .
. . . 6 . . . . . .
. . . . . . . . . .
. . . . . 4 . . . .
. . . . . . . . . .
. . . 5 . . . . . .
. . . . . . . . 1 .
. . . . . . H . . 3
P . . . 2 . . . . .

Given that the Human intends to place an object next to the purple star at (3, 7), which object is the Human more likely to pick up next? (a) yellow star at (4, 0). (b) red star at (3, 3)."""


def make_state(walls, cells, colors, human, helper, shape="star", params=PARAMS):
    width = params.width
    labels = (jnp.array([COLORS.index(c) for c in colors], jnp.int32),
              jnp.full(len(colors), SHAPES.index(shape), jnp.int32))
    return env.init_state(jax.random.key(0), jnp.asarray(walls),
                          jnp.array([y * width + x for x, y in cells]), human[1] * width + human[0],
                          helper[1] * width + helper[0], params, goal_pair=jnp.array([0, 1]),
                          labels=labels)


def play(state, actions, helper_actions=None, params=PARAMS):
    """Step the physics with fixed actions; returns the final state and the Trajectory."""
    helper_actions = helper_actions or [STAY] * len(actions)
    slices = []
    for human, helper in zip(actions, helper_actions):
        slices.append(trajectory_step(state, human, True))
        state = env.transition(state, human, helper, params)
    trajectory = jax.tree.map(lambda *xs: jnp.stack(xs), *slices)
    return state, trajectory.replace(layout=slices[0].layout)


@pytest.fixture(scope="module")
def figure11():
    start = make_state(np.zeros((10, 10), bool), FIG11_CELLS, FIG11_COLORS, (8, 3), (0, 0))
    final, trajectory = play(start, FIG11_ACTIONS)
    return start, final, trajectory


def test_object_label():
    assert text.object_label(0, 2) == "brown star"
    assert text.object_label(COLORS.index("gray"), SHAPES.index("pentagon")) == "gray pentagon"
    with pytest.raises(ValueError, match="color id 10"):
        text.object_label(10, 0)
    with pytest.raises(ValueError, match="shape id"):
        text.object_label(0, 5)


def test_transcript_reproduces_figure_11(figure11):
    _, final, trajectory = figure11
    question = text.qa_question(final, "pick", 6, (2, 5), with_positions=True)
    assert text.render_text(final, trajectory, question) == FIG11_TEXT


def test_transcript_accepts_observation_and_longer_trajectory(figure11):
    start, final, trajectory = figure11
    assert text.render_text(observe(final), trajectory) == text.render_text(final, trajectory)
    # A trajectory that continues past the described state: only the first t steps are told.
    longer, long_traj = play(start, FIG11_ACTIONS + (UP, RIGHT))
    assert int(longer.time) == 6
    assert text.state_details(final, long_traj) == text.state_details(final, trajectory)


def test_transcript_at_step_zero_needs_no_trajectory(figure11):
    start, _, _ = figure11
    details = text.state_details(start)
    assert "Step 0" in details
    assert "- Human pos: (8, 3)" in details
    assert "Action trajectory (human positions):\n\nASCII state:" in details


def test_transcript_rejects_mismatched_inputs(figure11):
    start, final, trajectory = figure11
    with pytest.raises(ValueError, match="Trajectory of the actions"):
        text.state_details(final)
    mid, _ = play(start, FIG11_ACTIONS[:2])
    other = mid.replace(human_pos=jnp.array([0, 9], jnp.int32))
    with pytest.raises(ValueError, match="after step 2"):
        text.state_details(other, trajectory)
    short = trajectory.replace(valid=trajectory.valid.at[3].set(False))
    with pytest.raises(ValueError, match="only 3 valid steps"):
        text.state_details(final, short)
    batched = jax.tree.map(lambda x: jnp.stack([x, x]), final)
    with pytest.raises(ValueError, match=r"walls must be \[H, W\]"):
        text.render_text(batched, trajectory)


WALLED = """\
. . . . # . . .
. 0 . . # . 2 .
. . . . . . . .
# # . P . # # .
. . . . . . 1 .
H . 3 . # . . ."""


def test_ascii_map_orientation_walls_and_round_trip():
    params = EnvParams(height=6, width=8, num_objects=4, max_walls=12)
    layout = parse_ascii(WALLED)
    cells = [layout.objects[i] for i in range(4)]
    state = make_state(layout.walls, cells, COLORS[:4], layout.human_pos, layout.helper_pos,
                       shape="square", params=params)
    assert text.ascii_map(state) == WALLED
    back = parse_ascii(text.ascii_map(state))
    assert back.human_pos == (0, 0) and back.helper_pos == (3, 2)
    assert back.objects == {0: (1, 4), 1: (6, 1), 2: (6, 4), 3: (2, 0)}
    np.testing.assert_array_equal(back.walls, np.asarray(state.layout.walls))
    details = text.state_details(state)
    # Obstacles in cell-index order (y, then x), as (x, y) pairs.
    assert "Obstacles:\n[(4, 0), (0, 2), (1, 2), (5, 2), (6, 2), (4, 4), (4, 5)]\n" in details
    assert "{'brown square': (1, 4), 'pink square': (6, 1), 'red square': (6, 4), " \
           "'blue square': (2, 0)}" in details


def test_ascii_round_trip_on_random_episodes(states):
    for i in range(5):
        state = unbatch(states, i)
        back = parse_ascii(text.ascii_map(state))
        np.testing.assert_array_equal(back.walls, np.asarray(state.layout.walls))
        assert back.human_pos == tuple(np.asarray(state.human_pos).tolist())
        assert back.helper_pos == tuple(np.asarray(state.helper_pos).tolist())
        assert back.objects == {i: tuple(p) for i, p in enumerate(np.asarray(state.obj_pos).tolist())}


def test_carried_object_sits_at_the_human(figure11):
    start, _, _ = figure11
    # Walk onto the orange star at (8, 2) and pick it up, then move left with it.
    state, trajectory = play(start, (DOWN, PICK, LEFT))
    assert int(state.human_holding) == 1
    details = text.state_details(state, trajectory)
    assert "'orange star': (7, 2)" in details
    assert "t=1: down (0, -1); t=2: pick (0, 0); t=3: left (-1, 0)" in details
    assert "t=1: (8, 2); t=2: (8, 2); t=3: (7, 2)" in details
    assert ". . . . . . . H . ." in text.ascii_map(state)


def test_qa_prompt_image_modality_matches_figure_6_form(figure11):
    _, final, trajectory = figure11
    prompt = text.qa_prompt(final, trajectory, "pick", 2, (1, 4), modality="image")
    labels = ", ".join(f"{c} star" for c in FIG11_COLORS[:-1]) + ", and blue star"
    assert prompt == (
        "<image> You are a helper agent in a GridWorld environment. You are the red robot, and "
        "the Human is the green robot. There are multiple objects: " + labels + ". The Human's "
        "goal is to place two of the objects next to each other. The Human can move up, down, "
        "left, right, or stay, and can pick up an object when standing on it and not holding "
        "one, and can put down an object when holding one and the cell is empty. The Human's "
        "action trajectory so far is shown in the image. Given that the Human intends to place "
        "an object next to the yellow star, which object is the Human more likely to pick up "
        "next? (a) orange star. (b) green star. "
        "Please respond with only a single lower case letter a or b.")
    assert "State and trajectory details" not in prompt


def test_qa_prompt_text_modality_and_question_kinds(figure11):
    _, final, trajectory = figure11
    prompt = text.qa_prompt(final, trajectory, "pick", 6, (2, 5))
    assert prompt == FIG11_TEXT + " " + text.QA_INSTRUCTION
    place = text.qa_prompt(final, trajectory, "place", 1, (0, 3), modality="image")
    assert ("Given that the Human intends to pick up the orange star, which object is the Human "
            "more likely to place an object next to? (a) brown star. (b) pink star.") in place
    carried = text.qa_prompt(final, trajectory, "place_carried", 1, (0, 3), modality="image")
    assert "Given that the Human is holding the orange star, which object" in carried
    assert "place the carried object next to? (a) brown star. (b) pink star." in carried
    with pytest.raises(ValueError, match="unknown question kind"):
        text.qa_prompt(final, trajectory, "where", 1, (0, 3))
    with pytest.raises(ValueError, match="two distinct object ids"):
        text.qa_prompt(final, trajectory, "pick", 1, (1, 3))
    with pytest.raises(ValueError, match="object id 9 out of range"):
        text.qa_prompt(final, trajectory, "pick", 1, (0, 9))
    with pytest.raises(ValueError, match="unknown modality"):
        text.qa_prompt(final, trajectory, "pick", 1, (0, 3), modality="audio")


def test_assistance_prompt_has_schema_objects_and_instructions(figure11):
    _, final, trajectory = figure11
    prompt = text.assistance_prompt(final, trajectory, 2, modality="image")
    assert prompt.startswith("<image> You are a helper agent")
    assert ("There are multiple objects: brown star, orange star, yellow star, pink star, green "
            "star, red star, purple star, and blue star.") in prompt
    assert ("Please propose a probability distribution that includes 2 candidate paired goals "
            "and their probabilities. Your response should include the probability distribution "
            "formatted according to this JSON schema: " + text.GOAL_PARTICLES_SCHEMA + ".\n\n"
            + text.NEAREST_FIRST_NOTE + "\nPlease output the minified JSON.") in prompt
    assert prompt.endswith("Please output the minified JSON.")
    in_text = text.assistance_prompt(final, trajectory, 4)
    assert in_text.startswith(FIG11_TEXT.split("\n\nGiven that")[0] + "\n\nPlease propose")
    assert "includes 4 candidate paired goals" in in_text
    with pytest.raises(ValueError, match="num_particles"):
        text.assistance_prompt(final, trajectory, 0)


def test_schema_is_valid_json_with_the_particle_fields():
    import json
    schema = json.loads(text.GOAL_PARTICLES_SCHEMA)
    particle = schema["$defs"]["GoalParticle"]
    assert particle["required"] == ["object1", "object2", "p"]
    assert schema["$defs"]["Object"]["required"] == ["color", "shape"]
    assert schema["required"] == ["particles"]
    assert "object1 is strictly the object closer" in text.NEAREST_FIRST_NOTE
