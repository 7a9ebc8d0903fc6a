"""Per-device live bytes of a run on 8 simulated devices (fsdp=8) against what `jaxtom plan`
lists as resident (`plan.resident_terms`), at the run's named points:

- `loaded`: a saved Hugging Face checkpoint (a scaled-down Qwen3 with random weights, written
  by `save_pretrained`) read through the normal path, `models.from_pretrained(path, mesh=)`;
- `init_state`: after `Learner.init_state` (the loaded model dropped, as the trainer drops it);
- `rollout`: while the sampler runs on the train state's params (measured inside each of its
  programs' calls) and just after `sampler.generate`, its ResumeState cache alive;
- `update`: after one `Learner.update`, with the batch it was given.

Measured bytes are the addressable shards of `jax.live_arrays()` summed per device. At each
point no device may hold more than 1.1x the plan's per-device total, and the plan's total
must agree with the most any device holds within 10%: so a device holding an unsharded copy
(a replica, a model kept for the run) or a sharding that differs from the plan's fails.
XLA's temporaries are not live arrays; the plan takes those from `memory_analysis()`.

The model's parameters dominate the small replicated leaves (norms, step counter, RNG key)
so that a 10% agreement means something: every projection divides by 8.
"""

import json

import pytest

from tests.simulated import run_on_devices

TOY = "configs/toy_cpu.py"
# ~1.4M params (5.8 MB float32, 0.72 MB per device); replicated norms are ~6 KB
TINY = dict(family="qwen3", vocab_size=1024, hidden_size=256, intermediate_size=512,
            num_layers=2, num_heads=4, num_kv_heads=2, head_dim=64, qk_norm=True,
            max_position_embeddings=512, tie_word_embeddings=True, eos_token_ids=(7,))

SCRIPT = r"""
import gc, json
import jax, numpy as np
from flax import nnx

from jaxtom import models, parallel, plan
from jaxtom import plan_shapes
from jaxtom import plan_rollout

from jaxtom.sampling import loop as sampling_loop

from jaxtom.sampling import sampler
from jaxtom.config import load_config
from jaxtom.models.config import ModelConfig
from jaxtom.rl.step import Learner

args = json.loads(ARGS)
workdir = args["workdir"]


def per_device(arrays):
    # bytes per device of the arrays' addressable shards, from the shardings: reading
    # `shard.data` would create per-shard arrays that `live_arrays` then lists too
    out = {}
    for a in arrays:
        for device, index in a.sharding.addressable_devices_indices_map(a.shape).items():
            shape = [len(range(*i.indices(n))) for i, n in zip(index, a.shape)]
            out[str(device)] = out.get(str(device), 0) + int(np.prod(shape)) * a.dtype.itemsize
    return out


def live():
    gc.collect()
    return per_device(jax.live_arrays())


def tree_bytes(tree):
    return per_device([x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)])


# a saved checkpoint of random weights, written by the normal save path from one device
cfg = ModelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in args["model"].items()})
ckpt = f"{workdir}/ckpt"
models.save_pretrained(models.init_decoder(cfg, seed=1), ckpt)
gc.collect()
assert not jax.live_arrays(), "the saved model is still alive"

config = load_config(args["config"], [f"model.path={ckpt}", *args["overrides"]])
mesh = parallel.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
planned = plan.resident_terms(config, mesh)
measured, terms = {}, {}

model = models.from_pretrained(ckpt, dtype=config.model.param_dtype,
                               compute_dtype=config.model.compute_dtype, mesh=mesh)
measured["loaded"] = live()
terms["loaded"] = {"params": tree_bytes(nnx.state(model))}

learner = Learner(model, config.step, mesh, total_steps=config.trainer.total_steps)
state = learner.init_state(model, seed=0)
del model
measured["init_state"] = live()
terms["init_state"] = {"params": tree_bytes(state.params),
                       "reference_params": tree_bytes(state.ref_params),
                       "optimizer_state": tree_bytes(state.opt_state)}

if args["rollout"]:
    # inside the sampler: live bytes as each of its programs is called
    inside = []
    programs = sampling_loop.programs

    def watching(*a, **k):
        def watch(fn):
            def call(*x, **y):
                inside.append(live())
                return fn(*x, **y)
            return call
        return tuple(map(watch, programs(*a, **k)))

    sampling_loop.programs = watching
    t = config.trainer
    rows = plan_rollout.sampler_call_rows(config)
    rng = np.random.default_rng(0)
    prompt_len = t.row_len - t.max_new_tokens
    prompts = rng.integers(8, cfg.vocab_size, (rows, prompt_len)).tolist()
    sampling_model = learner.sampling_model(state)  # what the trainer's rollouts sample from
    result = sampler.generate(sampling_model, prompts, max_new_tokens=t.max_new_tokens,
                               temperature=1.0, key=jax.random.key(0), stop_at_eos=False)
    sampling_loop.programs = programs
    measured["rollout"] = live()
    measured["rollout_inside"] = {d: max(m[d] for m in inside) for d in inside[0]}
    terms["rollout"] = {"kv_cache": tree_bytes(result.state.cache)}
    del result, sampling_model
    gc.collect()

if args["update"]:
    from jaxtom.rl.batch import Batch
    abstract = plan_shapes.abstract_update_batch(config, plan_shapes.model_config(config.model), learner)
    rng = np.random.default_rng(1)
    R, T = abstract.tokens.shape

    def host(name, sds):
        if name == "tokens":
            return rng.integers(8, cfg.vocab_size, (R, T)).astype(np.int32)
        if name == "positions":
            return np.broadcast_to(np.arange(T, dtype=np.int32), (R, T)).copy()
        if name in ("segment_ids", "policy_mask"):
            return np.ones((R, T), sds.dtype)
        if name == "advantages":
            return rng.standard_normal((R, T)).astype(np.float32)
        return np.zeros(sds.shape, sds.dtype)

    local = Batch(**{f: None if getattr(abstract, f) is None else host(f, getattr(abstract, f))
                     for f in ("tokens", "positions", "segment_ids", "policy_mask",
                               "advantages", "group_ids", "ref_logp", "decision_mask")})
    batch = learner.put_batch(local)
    state, metrics = learner.update(state, batch)
    jax.block_until_ready(state)
    measured["update"] = live()
    terms["update"] = {"params": tree_bytes(state.params), "batch": tree_bytes(batch)}
    del metrics

print("RESULT " + json.dumps({"planned": planned, "measured": measured, "terms": terms,
                              "devices": [str(d) for d in jax.devices()]}))
"""


def run(tmp_path, overrides, rollout=True, update=True) -> dict:
    args = {"workdir": str(tmp_path), "config": TOY, "model": TINY, "overrides": overrides,
            "rollout": rollout, "update": update}
    return run_on_devices(SCRIPT.replace("json.loads(ARGS)", f"json.loads({json.dumps(args)!r})"),
                          devices=8)


def check(out: dict, point: str, planned_point: str | None = None) -> None:
    """No device over 1.1x the plan's per-device total at `point`; the plan within 10% of
    the most any device holds; every device measured."""
    planned = sum(out["planned"][planned_point or point].values())
    measured = out["measured"][point]
    assert sorted(measured) == sorted(out["devices"]), f"{point}: devices {sorted(measured)}"
    worst = max(measured.values())
    assert worst <= 1.1 * planned, (f"{point}: a device holds {worst} B, over 1.1x the plan's "
                                    f"{planned} B per device ({measured})")
    assert abs(worst - planned) <= 0.1 * planned, (f"{point}: the plan says {planned} B per "
                                                   f"device, the most measured is {worst} B "
                                                   f"({out['planned'][planned_point or point]})")


def check_term(out: dict, point: str, term: str) -> None:
    """A plan term equals the bytes of the run's own arrays for it on every device."""
    measured = out["terms"][point][term]
    planned = out["planned"][point][term]
    assert set(measured.values()) == {planned}, (point, term, planned, measured)


COMMON = ["mesh.fsdp=8", "step.kl_coef=0.01", "trainer.prompts_per_step=4",
          "trainer.group_size=8", "trainer.row_len=64", "trainer.max_new_tokens=8",
          "step.micro_batches=1", "step.ppo_mini_batches=1"]


@pytest.mark.parametrize("compute", ["float32", "bfloat16"])
def test_live_bytes_after_loading_and_init_state_and_rollout_match_the_plan(tmp_path, compute):
    """The cheap version: no update step (its compile is the slow part). With bfloat16
    compute the sampler reads a bfloat16 copy of the weights (`Learner.sampling_model`),
    which the plan counts as `sampler_weights`."""
    out = run(tmp_path, COMMON + [f"model.compute_dtype={compute}"], update=False)
    for point in ("loaded", "init_state", "rollout"):
        check(out, point)
    check(out, "rollout_inside", "rollout")
    check_term(out, "loaded", "params")
    for term in ("params", "reference_params", "optimizer_state"):
        check_term(out, "init_state", term)
    check_term(out, "rollout", "kv_cache")
    # the planned terms: a frozen fp32 reference, Adam's two moments, a KV cache
    p = out["planned"]
    assert p["init_state"]["reference_params"] == p["init_state"]["params"] == \
        p["loaded"]["params"]
    assert 2 * p["init_state"]["params"] <= p["init_state"]["optimizer_state"]
    assert p["rollout"]["kv_cache"] > 0
    # float32 master weights: none extra for float32 compute, a half-size copy for bfloat16
    expected = 0 if compute == "float32" else p["init_state"]["params"] // 2
    assert p["rollout"]["sampler_weights"] == expected


@pytest.mark.slow  # compiles the update on 8 simulated devices
def test_live_bytes_after_an_update_match_the_plan(tmp_path):
    out = run(tmp_path, COMMON, rollout=False)
    check(out, "init_state")
    check(out, "update")
    check_term(out, "update", "params")
    check_term(out, "update", "batch")
