"""`jaxtom gridworld simulate|render`: helper speedups and pictures of episodes."""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np

from jaxtom.gridworld import env
from jaxtom.gridworld import render as render_lib
from jaxtom.gridworld.simulation import HELPERS, rollout, simulate, state_at
from jaxtom.gridworld.types import EnvParams


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("gridworld", help="the Construction gridworld of MindZero")
    commands = parser.add_subparsers(dest="gridworld_command", required=True)

    sim = commands.add_parser("simulate", help="speedup of each helper over a stationary one")
    sim.add_argument("--episodes", type=int, default=100)
    sim.add_argument("--seeds", type=int, nargs="+", default=[10, 20, 30])
    sim.add_argument("--helpers", nargs="+", default=list(HELPERS), choices=HELPERS)
    sim.add_argument("--episode-seed", type=int, default=0, help="seed of the episode scenes")
    sim.add_argument("--random-prob", type=float, default=0.15,
                     help="human's chance of a random move (0.15 in the paper's evaluation)")
    sim.add_argument("--max-steps", type=int, default=100)
    sim.add_argument("--teleport-after", type=int, default=3,
                     help="the helper's teleport rule (gridworld.helper): 3 as in the public "
                          "code's evaluation, 0 turns it off")
    sim.add_argument("--json", type=pathlib.Path, help="also write the results here")
    sim.set_defaults(func=run_simulate)

    ren = commands.add_parser("render", help="draw one episode as a PNG or an animated GIF")
    ren.add_argument("out", type=pathlib.Path, help="output path ending in .png or .gif")
    ren.add_argument("--seed", type=int, default=0)
    ren.add_argument("--helper", default="bip", choices=HELPERS)
    ren.add_argument("--cell-size", type=int, default=24)
    ren.add_argument("--random-prob", type=float, default=0.0)
    ren.set_defaults(func=run_render)


def run_simulate(args) -> int:
    if args.episodes < 2:
        raise SystemExit("jaxtom gridworld simulate: --episodes must be >= 2 (for a standard error)")
    params = EnvParams(random_prob=args.random_prob, max_steps=args.max_steps,
                       teleport_after=args.teleport_after)
    result = simulate(jax.random.key(args.episode_seed), params, helpers=tuple(args.helpers),
                      num_episodes=args.episodes, seeds=tuple(args.seeds))
    print(f"{args.episodes} episodes x seeds {args.seeds}, human random_prob "
          f"{params.random_prob}, helper teleport_after {params.teleport_after}; baseline "
          f"(helper stays) takes "
          f"{result['baseline_mean_steps']:.1f} steps on average")
    print(f"{'helper':<8} {'speedup':>9} {'± sem':>8} {'steps':>7}")
    for helper in args.helpers:
        r = result[helper]
        print(f"{helper:<8} {r['mean']:>9.3f} {r['sem']:>8.3f} {r['mean_steps']:>7.1f}")
    print(f"mean exact-posterior probability of the true goal over steps: "
          f"{result['true_goal_posterior']:.3f}")
    if args.json:
        summary = {h: {k: v for k, v in result[h].items() if k != "speedup"} for h in args.helpers}
        summary["true_goal_posterior"] = result["true_goal_posterior"]
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


def run_render(args) -> int:
    suffix = args.out.suffix.lower()
    if suffix not in (".png", ".gif"):
        raise SystemExit(f"jaxtom gridworld render: output must end in .png or .gif, got {args.out}")
    params = EnvParams(random_prob=args.random_prob)
    key_reset, key_roll = jax.random.split(jax.random.key(args.seed))
    _, initial = jax.jit(env.reset, static_argnums=1)(key_reset, params)
    final, trajectory, _, _ = rollout(key_roll, initial, params, args.helper)
    length = int(np.asarray(trajectory.valid).sum())
    if suffix == ".png":
        image = render_lib.render_rgb(final, cell_size=args.cell_size, trace=trajectory)
        render_lib.save_png(image, args.out)
    else:
        states = [state_at(initial, trajectory, t) for t in range(length)] + [final]
        frames = [render_lib.render_rgb(s, cell_size=args.cell_size) for s in states]
        render_lib.save_gif(frames, args.out)
    print(f"wrote {args.out} ({length} steps, helper {args.helper})")
    return 0
