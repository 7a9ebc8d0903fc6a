"""`jaxtom plan`: ahead-of-time memory and FLOPs of a config from its model's config.json.

Successful plans run in a subprocess (`python -m jaxtom.commands.plan`): the command sets the
simulated device count before JAX starts, which this test process cannot undo once it has
started JAX.
The figures are checked against what they must equal, not against one machine's output:
per-device parameter bytes against the shard sizes implied by the rule table, XLA's
argument buffers against the train state + batch the plan says it holds, the analytic FLOPs
against XLA's own count where XLA can count (one device, no loops), and fsdp scaling.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxtom import plan
from jaxtom import plan_shapes
from jaxtom import plan_rollout
from jaxtom.commands import plan as plan_cli
from jaxtom.config import load_config
from jaxtom.models.config import load_hf_config

ROOT = Path(__file__).resolve().parents[1]
TOY = str(ROOT / "configs" / "toy_cpu.py")
# all projection sizes divide by 8, so every weight matrix shards on fsdp <= 8
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 512,
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 1024,
    "tie_word_embeddings": True, "eos_token_id": 7}
QWEN3_4B_DIR = ROOT / "launch" / "models" / "Qwen3-4B"  # shipped config.json (shapes only)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_qwen3")
    (d / "config.json").write_text(json.dumps(TINY_QWEN3))
    return d


def run_plan(config, *args, env=None):
    """`python -m jaxtom.commands.plan ...` -> (return code, stdout lines, stderr)."""
    env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "jaxtom.commands.plan", config, *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    return done.returncode, done.stdout.strip().splitlines(), done.stderr


def plan_json(config, *args, env=None) -> dict:
    rc, out, err = run_plan(config, *args, env=env)
    assert rc == 0, err[-3000:]
    return json.loads(out[-1])


def sharded_param_bytes(cfg, fsdp: int, itemsize: int = 4) -> int:
    """Per-device bytes of the tiny model's params under the default rules on (1, fsdp, 1):
    every weight matrix splits its `embed` axis over fsdp; RMSNorm weights are replicated."""
    L, d, hd = cfg.num_layers, cfg.hidden_size, cfg.head_dim
    norms = L * 2 * d + L * 2 * hd + d
    return ((cfg.num_params() - norms) // fsdp + norms) * itemsize


def test_tiny_plan_figures_are_consistent(tiny_dir):
    common = (f"model.path={tiny_dir}", "trainer.prompts_per_step=3", "trainer.group_size=3",
              "trainer.row_len=64", "trainer.max_new_tokens=16", "step.kl_coef=0.01")
    two = plan_json(TOY, *common, "mesh.fsdp=2")
    # a free axis takes the devices the others leave: fsdp=-1 on 4 devices; 2 processes
    four = plan_json(TOY, *common, "trainer.prompts_per_step=4", "mesh.fsdp=-1", "--devices", 4,
                     "--processes", 2)
    cfg = load_hf_config(tiny_dir)
    for result, fsdp, sequences in ((two, 2, 9), (four, 4, 12)):
        u, mem = result["update"], result["update"]["memory"]
        assert result["mesh"] == {"data": 1, "fsdp": fsdp, "tensor": 1, "devices": fsdp,
                                  "processes": fsdp // 2, "processes_inferred": (
                                      "one host holds up to 8 devices" if fsdp == 2 else None)}
        assert result["model"]["params"] == cfg.num_params() == result["model"]["trainable_params"]
        # one sequence per row, padded to a multiple of data x fsdp (micro/mini = 1)
        assert u["rows"] == math.ceil(sequences / fsdp) * fsdp and u["row_len"] == 64
        assert mem["params"] == sharded_param_bytes(cfg, fsdp)
        assert mem["frozen_params"] == 0  # full fine-tuning
        assert mem["reference_params"] == mem["params"]  # kl_coef > 0: a frozen copy
        # Adam's two moments, plus a few scalar counters
        assert 2 * mem["params"] <= mem["optimizer_state"] <= 2 * mem["params"] + 64
        # XLA's argument buffers are exactly what the plan says one device holds, and the
        # donated state comes back in place
        assert u["xla"]["arguments"] == pytest.approx(mem["train_state"] + mem["batch"],
                                                      rel=1e-3)
        assert u["xla"]["aliased"] == pytest.approx(mem["train_state"], rel=1e-3)
        assert u["xla"]["temporaries"] > 0
        assert result["per_device_peak_bytes"] >= u["xla"]["peak"] > mem["train_state"]
        assert all(result["fits"].values())
    sharded = sharded_param_bytes(cfg, 2) - sharded_param_bytes(cfg, 4)
    assert two["update"]["memory"]["params"] - four["update"]["memory"]["params"] == sharded
    assert 0.5 < four["update"]["memory"]["params"] / two["update"]["memory"]["params"] < 0.55

    r = two["rollout"]
    # 9 rows padded to data x fsdp = 2; prompt budget 64 - 16 = 48; 48 + 16 slots -> 64
    assert (r["rows"], r["prompt_len"], r["cache_len"]) == (10, 48, 64)
    per_device_rows = r["rows"] // 2
    kv = 2 * cfg.num_layers * per_device_rows * cfg.num_kv_heads * 64 * cfg.head_dim * 4
    assert r["memory"]["kv_cache"] == kv
    # each sampler program takes the weights and the cache (or the state holding it)
    for program in r["programs"].values():
        assert program["arguments"] >= kv + r["memory"]["model_state"]
    assert r["xla"] == r["programs"][r["peak_program"]]
    assert r["peak_with_train_state"] > two["update"]["memory"]["train_state"]
    assert r["flops"] == 2 * cfg.num_params() * 9 * (48 + 16)
    assert r["memory"]["model_state"] == two["update"]["memory"]["params"]  # the state's own

    # 2 processes x 2 devices: one SPMD call over the global 4-device mesh samples both
    # processes' 6 rows, on the train state's own sharded params (no replica)
    r4 = four["rollout"]
    assert (r4["processes"], r4["rows"], r4["rows_per_process"], r4["rows_per_device"]) == (
        2, 12, 6, 3)
    assert r4["memory"]["model_state"] == four["update"]["memory"]["params"]
    assert r4["memory"]["sampler_weights_extra"] == 0
    assert r4["memory"]["kv_cache"] == 2 * cfg.num_layers * 3 * cfg.num_kv_heads * 64 \
        * cfg.head_dim * 4
    assert r4["peak_with_train_state"] == (four["update"]["memory"]["train_state"]
                                           - r4["memory"]["model_state"] + r4["xla"]["peak"])

    # what stays resident at each point of the run, from the same shardings
    for result, fsdp in ((two, 2), (four, 4)):
        res, mem = result["resident"], result["update"]["memory"]
        assert list(res) == ["loaded", "init_state", "rollout", "update"]
        assert res["loaded"] == {"params": sharded_param_bytes(cfg, fsdp)}
        assert sum(res["init_state"].values()) == mem["train_state"]
        assert res["rollout"]["kv_cache"] == result["rollout"]["memory"]["kv_cache"]
        assert res["rollout"]["sampler_weights"] == 0
        assert res["update"]["batch"] == mem["batch"]


@pytest.mark.parametrize("config, extra", [
    (TOY, ("step.lambda_pred=1.0",)),
    (TOY, ("model.lora_rank=8", "step.lora=true")),
    (str(ROOT / "configs" / "ctom_math_smollm2.py"), ("model.family=qwen3",)),
])
def test_update_flops_match_xla_on_one_device(tiny_dir, config, extra):
    """XLA counts every FLOP when nothing loops (1 device, 2 unrolled layers, 1 micro-batch)."""
    result = plan_json(config, f"model.path={tiny_dir}", "trainer.row_len=128",
                       "step.kl_coef=0.01", "step.micro_batches=1", *extra, "--no-rollout")
    u = result["update"]
    assert result["mesh"]["devices"] == 1
    # no --processes: inferred, and said so
    assert result["mesh"]["processes"] == 1
    assert result["mesh"]["processes_inferred"] == "one host holds up to 8 devices"
    assert "v5e-16GB" in result["fits"] and "v5e-16GB" in result["accelerators"]
    # elementwise work (norms, softmax, RoPE, the loss) is not in the analytic count
    assert 1.0 <= u["xla_flops_per_device_loop_bodies_once"] / u["flops"] < 1.1
    if "step.lora=true" in extra:
        assert result["model"]["trainable_params"] < result["model"]["params"] / 10
        assert u["memory"]["frozen_params"] > 10 * u["memory"]["params"]
    # a prediction loss without a fixed number of prediction rows cannot be planned: said so
    assert u["prediction_rows_left_out"] == (extra == ("step.lambda_pred=1.0",))
    if config != TOY:  # CToM's fixed prediction sub-batch is planned and counted
        ctom = load_config(config, [f"model.path={tiny_dir}"]).ctom
        rows, T, p_rows, p_len = u["rows"], u["row_len"], ctom.pred_rows, ctom.pred_row_len
        assert p_rows > 0
        assert (u["prediction_rows"], u["prediction_row_len"]) == (p_rows, p_len)
        # 4 int32 and 2 float32 arrays per policy token, 3 int32 + 1 float32 per prediction one
        assert u["memory"]["batch"] == rows * T * 6 * 4 + p_rows * p_len * 4 * 4


@pytest.mark.parametrize("args, starts", [
    (("step.learning_rate=abc",), "config error: step.learning_rate: expected a number"),
    (("no_such.field=1",), "config error: no_such.field"),
    (("mesh.fsdp=-1",), "plan error: mesh (data, fsdp, tensor)=(1, -1, 1) has a -1 axis"),
    (("mesh.fsdp=2", "--devices", "4"), "plan error: --devices 4 disagrees"),
    (("mesh.fsdp=4", "--processes", "3"), "plan error: --processes 3 must be a positive"),
    (("mesh.fsdp=4", "trainer.prompts_per_step=3", "--processes", "4"),
     "plan error: trainer.prompts_per_step=3 is fewer than --processes 4"),
    (("--headroom", "1.5"), "plan error: --headroom must be a fraction in (0, 1]"),
])
def test_bad_input_is_one_line_exit_2(args, starts, tiny_dir, capsys):
    assert plan_cli.main([TOY, f"model.path={tiny_dir}", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), captured.err
    assert captured.out == ""


@pytest.mark.parametrize("devices, kind, processes", [
    (1, None, 1), (8, None, 1), (16, None, 4), (32, None, 8), (64, None, 16),
    (32, "H100", 4), (16, "h200", 2), (8, "v5p", 2), (4, "v5p", 1), (32, "v5p", 8),
    (8, "v5e", 1), (32, "v5e", 8), (8, "v6e", 1), (32, "v6e-32GB", 8)])
def test_processes_are_inferred_from_the_devices_per_host(devices, kind, processes):
    got, how = plan.infer_processes(devices, plan.accelerator(kind) if kind else None)
    assert got == processes and how


def test_inferred_processes_are_checked_and_named(tiny_dir, capsys):
    """32 devices plan 8 processes (4 TPU chips per host) unless told otherwise, 4 on 8-GPU
    hosts, so 3 prompts per step are too few; the error says how the count was inferred.
    No compiling happens."""
    common = [TOY, f"model.path={tiny_dir}", "mesh.fsdp=32", "trainer.prompts_per_step=3"]
    assert plan_cli.main(common) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("plan error: trainer.prompts_per_step=3 is fewer than --processes "
                           "8 (inferred: 32 devices / 4 per host; "), line
    assert plan_cli.main([*common, "--accelerator", "H100"]) == 2
    assert "--processes 4 (inferred: 32 devices / 8 per H100-80GB host)" in \
        capsys.readouterr().err
    assert plan_cli.main([*common, "--accelerator", "tpu9"]) == 2
    assert "--accelerator 'tpu9': expected one of" in capsys.readouterr().err


CTOM_PAPER = [str(ROOT / "configs" / f"ctom_{d}_qwen3_8b.py")
              for d in ("coding", "math", "writing")]
# the 32-device mesh jaxtom/ctom/experiments.py documents for the CToM paper configs
CTOM_32_DEVICES = ("mesh.fsdp=16", "mesh.tensor=2")


@pytest.mark.parametrize("config", CTOM_PAPER)
def test_ctom_paper_configs_pad_at_most_a_tenth_on_32_devices(config, monkeypatch):
    """144 rows (36 prompts x 4) in 3 PPO mini-batches: on 32 data x fsdp devices each
    mini-batch of 48 rows pads to 64 (192 in all); on the documented (1, 16, 2) mesh none
    pads, and the plan names that mesh when the config's fsdp=-1 takes all 32."""
    from jaxtom.rl.batch import update_rows

    monkeypatch.setenv("JAXTOM_MODELS", str(QWEN3_4B_DIR.parent))
    config = load_config(config, list(CTOM_32_DEVICES))
    mcfg = plan_shapes.model_config(config.model)
    rows, s = plan_shapes.rollout_rows(config), config.step
    sizes = plan_shapes.mesh_sizes(config.mesh, 32)
    assert sizes == (1, 16, 2)
    padded = update_rows(rows, sizes[0] * sizes[1], s.ppo_mini_batches, s.micro_batches)[0]
    assert plan.padding(rows, padded)["fraction"] <= plan.PADDING_LIMIT
    assert plan.less_padding(config, mcfg, sizes) is None
    better = plan.less_padding(config, mcfg, (1, 32, 1))
    assert plan.padding(rows, 192)["fraction"] > plan.PADDING_LIMIT
    assert better["mesh"] == (1, 16, 2) and better["padding"]["padding_rows"] == 0


def test_missing_config_json_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_text("")  # weights alone are not enough
    assert plan_cli.main([TOY, f"model.path={tmp_path}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: model.path: expected a "
                                                   "Hugging Face directory holding config.json")


@pytest.mark.parametrize("prompts, rollout_rows, processes", [
    (4, 0, 1), (4, 6, 1), (3, 0, 2), (3, 6, 2), (3, 3, 2), (5, 4, 4), (32, 128, 8)])
def test_sampler_call_rows_is_the_largest_call_generate_rows_makes(prompts, rollout_rows,
                                                                  processes):
    """Each process's share (`process_share`) x group size, the first call taking each
    process's next `rollout_rows` rows (`rl.distributed.call_slices`)."""
    from jaxtom.rl.distributed import call_slices
    from jaxtom.rl.trainer import process_share

    config = load_config(TOY, [f"trainer.prompts_per_step={prompts}", "trainer.group_size=4",
                               f"trainer.rollout_rows={rollout_rows}"])
    counts = [process_share(prompts, processes, p)[1] * 4 for p in range(processes)]
    calls = [sum(s.stop - s.start for s in call) for call in call_slices(counts, rollout_rows)]
    assert plan_rollout.sampler_call_rows(config, processes) == max(calls)


def test_fits_leaves_headroom_on_each_chip():
    assert plan.fits(72e9) == {"H100-80GB": True, "H200-141GB": True, "v5p-95GB": True,
                               "v5e-16GB": False, "v6e-32GB": False}
    assert plan.fits(14.4e9)["v5e-16GB"] and not plan.fits(14.5e9)["v5e-16GB"]
    assert plan.ACCELERATOR_SPECS["v5e-16GB"].bf16_tflops == 197.0
    assert plan.fits(72.1e9)["H100-80GB"] is False  # over 90% of 80 GB
    assert plan.fits(72.1e9, headroom=1.0)["H100-80GB"] is True
    with pytest.raises(ValueError, match="headroom"):
        plan.fits(1.0, headroom=0.0)


@pytest.mark.slow
def test_qwen3_4b_paper_config_plans_from_config_json_alone(tmp_path):
    """The MindZero paper config with only Qwen3-4B's config.json present (no weights)."""
    config = str(ROOT / "configs" / "mindzero_gridworld_qwen3_4b.py")
    result = plan_json(config, env={"JAXTOM_MODELS": str(QWEN3_4B_DIR.parent)})
    n = result["mesh"]["devices"]
    assert result["model"]["params"] == 4_022_468_096
    assert result["model"]["param_dtype"] == "float32"
    mem = result["update"]["memory"]
    # fp32 master params sharded n ways (norms replicated: a few MB)
    assert 4 * 4_022_468_096 / n <= mem["params"] < 4 * 4_022_468_096 / n + 2 ** 22
    assert result["rollout"]["memory"]["kv_cache"] > 0
    assert result["seconds"] < 600


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["coding", "math", "writing"])
def test_ctom_paper_configs_fit_an_h100_and_a_v5p_on_8_devices(domain):
    """The CToM paper configs (Qwen3-8B, 16,384-token rows) from config.json alone, rollout
    included: long prefills attend blockwise, so a sampler call's prefill no longer forms
    rows x 16k x 20k scores (1.6 TB per device before)."""
    config = str(ROOT / "configs" / f"ctom_{domain}_qwen3_8b.py")
    result = plan_json(config, "--devices", 8,
                       env={"JAXTOM_MODELS": str(QWEN3_4B_DIR.parent)})
    assert result["update"]["row_len"] == 16384
    assert result["fits"]["H100-80GB"] and result["fits"]["v5p-95GB"], result["fits"]


def test_replans_in_a_fresh_process_when_jax_already_started(tiny_dir):
    """Inside a process whose JAX already runs on 1 device (a notebook, say), `run` cannot
    add devices, so it plans in a child process with the device count set."""
    script = ("import jax, sys; assert jax.device_count() == 1; "
              "from jaxtom.commands import plan as plan_cli; "
              f"sys.exit(plan_cli.main([{TOY!r}, 'model.path={tiny_dir}', 'mesh.fsdp=2', "
              "'--no-rollout']))")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mesh"]["devices"] == 2 and "rollout" not in result


def test_largest_term_names_the_biggest_item_and_what_shrinks_it():
    result = {"update": {"xla": {"temporaries": 5 * 2 ** 30},
                         "memory": {"train_state": 7 * 2 ** 30}},
              "rollout": {"xla": {"temporaries": 2 ** 30}, "memory": {"kv_cache": 2 ** 29}}}
    assert plan_cli.largest_term(result).startswith("train state (7.00 GiB): it shrinks with more "
                                                "fsdp")
    result["update"]["xla"]["temporaries"] = 9 * 2 ** 30
    assert "raise step.micro_batches" in plan_cli.largest_term(result)
    result["rollout"]["memory"]["kv_cache"] = 10 * 2 ** 30
    assert plan_cli.largest_term(result).startswith("KV cache (10.00 GiB)")


def test_ctom_plan_counts_the_kept_kv_store_for_every_conversation():
    """CToM's kept KV-cache store (`ctom.kept_cache`) holds every conversation of the step
    for the whole rollout: `resident_terms` lists it at the rollout point, sized as the
    store sizes itself (one slot row per conversation, sharded over data x fsdp); a run
    with `ctom.reuse_cache=False` has none."""
    import jax

    from jaxtom import parallel
    from jaxtom.ctom import kept_cache

    args = ["trainer.prompts_per_step=3", "trainer.group_size=4"]
    config = load_config(str(ROOT / "configs" / "ctom_math_smollm2.py"),
                         args + ["model.path=", "model.vocab_size=512", "model.hidden_size=64",
                                 "model.intermediate_size=128", "model.num_layers=2",
                                 "model.num_heads=4", "model.num_kv_heads=2",
                                 "model.head_dim=16"])
    mesh = parallel.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    terms = plan.resident_terms(config, mesh)
    text = plan_shapes.model_config(config.model).text_config
    slots = plan_rollout.rollout_shapes(config, text, mesh)["cache_len"]
    assert terms["rollout"]["kept_kv_store"] == kept_cache.device_bytes(text, 12, slots, mesh)
    assert terms["rollout"]["kept_kv_store"] == 2 * 2 * 12 * 2 * slots * 16 * 4
    off = dataclasses.replace(config, ctom=dataclasses.replace(config.ctom, reuse_cache=False))
    assert "kept_kv_store" not in plan.resident_terms(off, mesh)["rollout"]


def _paper_configs() -> list[tuple[str, tuple[str, ...]]]:
    """(config, arguments) of every paper config on the mesh it documents: MindZero's own
    (1, 8, 1), one 8-GPU host (launch/README.md's table); CToM's on 32 devices as
    `CTOM_32_DEVICES` (jaxtom/ctom/experiments.py)."""
    import glob

    out = []
    for path in sorted(glob.glob(str(ROOT / "configs" / "*.py"))):
        name = Path(path).stem
        if not any(k in name for k in ("_qwen3_", "_qwen3vl_4b", "_qwen3vl_8b", "_llama")):
            continue
        out.append((path, (*CTOM_32_DEVICES, "--devices", "32") if name.startswith("ctom_")
                    else ()))
    return out


@pytest.mark.slow  # an 8B update and sampler compiled on 8 or 32 simulated devices each
@pytest.mark.parametrize("config, args", _paper_configs(),
                         ids=[Path(c).stem for c, _ in _paper_configs()])
def test_every_paper_config_plans_on_its_documented_mesh(config, args):
    """Every paper config plans from its model's config.json alone: the chips listed include
    v5e, the process count is inferred (one 8-device host; 8 hosts of 4 TPU chips for 32
    devices) and said, and CToM's update pads at most a tenth of its rows on 32 devices."""
    env = {"JAXTOM_MODELS": str(QWEN3_4B_DIR.parent), "JAXTOM_REWARD_URL": "http://127.0.0.1:1"}
    result = plan_json(config, *args, env=env)
    mesh = result["mesh"]
    assert "v5e-16GB" in result["fits"] and "v5e-16GB" in result["accelerators"]
    assert mesh["processes_inferred"]
    assert mesh["processes"] == (8 if mesh["devices"] == 32 else 1)
    assert "rollout" in result and result["rollout"]["processes"] == mesh["processes"]
    if Path(config).stem.startswith("ctom_"):
        assert mesh["devices"] == 32 and result["update"]["padding"]["fraction"] <= 0.1
