import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.gridworld import layout, reference
from jaxtom.gridworld.types import INF, EnvParams


def test_all_pairs_distances_match_bfs(states):
    for i in range(4):
        walls = np.asarray(states.layout.walls[i])
        dist = np.asarray(states.layout.dist[i])
        height, width = walls.shape
        for source in [(0, 0), (3, 7), (9, 9), (5, 2)]:
            expected = reference.bfs(walls, source).reshape(-1)
            got = dist[source[1] * width + source[0]]
            np.testing.assert_array_equal(np.minimum(got, INF), np.minimum(expected, INF))


def test_every_generated_layout_is_connected_and_within_wall_budget(states, params):
    walls = np.asarray(states.layout.walls)
    counts = walls.reshape(len(walls), -1).sum(1)
    assert counts.min() >= params.min_walls and counts.max() <= params.max_walls
    assert counts.max() > 5, "wall counts should vary over U(0, 20)"
    for w in walls:
        free = np.argwhere(~w)
        start = (int(free[0][1]), int(free[0][0]))
        reach = reference.bfs(w, start)
        assert (reach[~w] < INF).all()
        assert bool(layout.is_connected(jnp.asarray(w)))


def test_move_table_blocks_walls_and_border():
    scene = layout.parse_ascii("""
        . . #
        . # .
        . . .
    """)
    table = np.asarray(layout.make_layout(jnp.asarray(scene.walls)).next_cell)
    # cell (0, 0) = index 0: up -> (0, 1) = 3, down blocked by border, left blocked, right -> 1
    assert table[0].tolist() == [0, 3, 0, 0, 1]
    # cell (1, 0): up is the wall at (1, 1)
    assert table[1].tolist() == [1, 1, 1, 0, 2]


def test_parse_ascii_reads_agents_objects_and_orientation():
    scene = layout.parse_ascii("""
        H . 1
        . # .
        0 . P
    """)
    assert scene.human_pos == (0, 2)
    assert scene.helper_pos == (2, 0)
    assert scene.objects == {0: (0, 0), 1: (2, 2)}
    assert scene.walls[1, 1] and scene.walls.sum() == 1


@pytest.mark.parametrize("text, message", [
    ("..x\n...\n...", "unknown layout character 'x'"),
    ("...\n..\n...", "row 1 has 2 cells"),
    (".#.\n.#.\n.#.", "disconnected"),
    ("", "empty"),
    ("0.0\n...\n...", "appears twice"),
])
def test_parse_ascii_rejects_bad_layouts(text, message):
    with pytest.raises(ValueError, match=message):
        layout.parse_ascii(text)


def test_sample_walls_is_deterministic_per_key():
    params = EnvParams()
    a = layout.sample_walls(jax.random.key(7), params)
    b = layout.sample_walls(jax.random.key(7), params)
    c = layout.sample_walls(jax.random.key(8), params)
    assert (a == b).all() and not (a == c).all()


def test_bad_params_are_rejected():
    with pytest.raises(ValueError, match="num_objects"):
        EnvParams(num_objects=1)
    with pytest.raises(ValueError, match="min_walls <= max_walls"):
        EnvParams(min_walls=5, max_walls=2)
