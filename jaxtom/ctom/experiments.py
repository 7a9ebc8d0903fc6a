"""The CToM experiments behind `configs/ctom_*.py`, one function per model and domain.

The config files only pick a domain; keeping the settings here means the three domains of an
experiment cannot drift apart. Table 4's per-domain caps come from `effort.domain_settings`.

Paper scale (tables 3/4): Qwen3-8B policy, LoRA rank 32, lr 1e-4 cosine, G = 4, prompt batch
36 (PPO minibatch 12 prompts -> 3 optimizer updates per rollout batch, `ppo_mini_batches=3`),
fp32 master weights with bf16 compute, simulator Qwen3-32B behind an OpenAI-compatible URL
(vLLM). Baselines and ablations by override:
  Naive GRPO (train) / Prompting Base (eval): ctom.controller.mode=direct
  w/o effort: ctom.controller.w_effort=0       w/o prediction: step.lambda_pred=0.0
  task-only: both of the above                 decision entropy: step.lambda_entropy=0.001
  in-process simulator: ctom.simulator=llm ctom.simulator_model=/ckpt/Qwen3-32B
CPU (SmolLM2-135M-Instruct, scripted simulator): caps far below table 4 so a laptop finishes
a step in minutes; `jaxtom eval CONFIG ctom.controller.mode=direct` gives Prompting Base.
"""

import os

from jaxtom.config import Config, MeshSection, ModelSection, TrainerConfig
from jaxtom.ctom.effort import W_EFFORT, domain_settings
from jaxtom.ctom.config import ControllerSettings, CToMSettings
from jaxtom.rl.step_config import StepConfig

# one row per micro-batch keeps CPU memory of the 30-layer backward near 8 GB
ROW_LEN = {"math": 896, "coding": 1280, "writing": 1024}


def smollm2_config(domain: str) -> Config:
    """SmolLM2-135M-Instruct (real GGUF weights), scripted simulator, caps sized for a CPU."""
    return Config(
        model=ModelSection(path="smollm2", family="llama", vocab_size=49152),
        step=StepConfig(learning_rate=1e-5, kl_coef=0.0, lambda_pred=1.0,
                        micro_batches=4, max_grad_norm=1.0),
        trainer=TrainerConfig(workdir=f"runs/ctom_{domain}_smollm2", total_steps=2,
                              prompts_per_step=2, group_size=2, max_new_tokens=16,
                              row_len=ROW_LEN[domain], num_rows=4, temperature=1.0,
                              checkpoint_every=2, progress=False),
        ctom=smollm2_settings(domain),
    )


def smollm2_settings(domain: str) -> CToMSettings:
    return CToMSettings(
        domain=domain, tasks="builtin", num_tasks=4, simulator="scripted",
        controller=ControllerSettings(max_rounds=1, max_revisions=1, plan_cap=12, ask_cap=16, draft_cap=24,
                        revision_cap=24, prediction_cap=12),
        pred_rows=4, pred_row_len=ROW_LEN[domain], eval_conversations=1)


PAPER_STEPS = {"math": 180, "coding": 208, "writing": 208}


def qwen3_8b_config(domain: str) -> Config:
    """Paper scale (section 5, table 4): Qwen3-8B with LoRA 32, lr 1e-4, G = 4, 36 prompts.

    Sized so that `jaxtom plan` fits an H100-80GB and a v5p-95GB chip on 8 devices with the
    16,384-token rows: sampler calls of 32 rows and no kept KV store (`ctom.reuse_cache=False`:
    at 144 conversations x 16k tokens the store alone takes 56 GiB per device, twice that
    while it grows; on 16 or more devices it fits beside the rest and can be turned back on).
    Long rows and prefills attend blockwise (`ModelConfig.attention`), since dense scores at
    16k tokens do not fit.

    On 32 devices (a v5p-64, a v6e-32, four 8-GPU hosts) run it as `mesh.fsdp=16
    mesh.tensor=2`: each of the 3 PPO mini-batches (48 rows) splits evenly over the 16
    data x fsdp devices, where fsdp=32 would pad every mini-batch to 64 rows (144 -> 192,
    +33% update compute); `jaxtom plan` names such a mesh whenever padding exceeds 10%."""
    steps = PAPER_STEPS[domain]
    return Config(
        model=ModelSection(path=os.environ.get("QWEN3_8B", os.path.join(
            os.environ.get("JAXTOM_MODELS", "/models"), "Qwen3-8B")), family="qwen3",
                           vocab_size=151936, param_dtype="float32", compute_dtype="bfloat16",
                           lora_rank=32, lora_alpha=32.0),
        step=StepConfig(learning_rate=1e-4, kl_coef=0.01, lambda_pred=1.0,
                        micro_batches=3, ppo_mini_batches=3, lora=True),
        trainer=TrainerConfig(workdir=f"runs/ctom_{domain}_qwen3_8b", total_steps=steps,
                              prompts_per_step=36, group_size=4, max_new_tokens=16,
                              row_len=16384, temperature=1.0, checkpoint_every=10,
                              rollout_rows=32),
        mesh=MeshSection(fsdp=-1),
        ctom=qwen3_8b_settings(domain),
    )


def qwen3_8b_settings(domain: str) -> CToMSettings:
    d = domain_settings(domain)
    return CToMSettings(
        domain=domain, tasks=os.environ.get("CTOM_TASKS", "builtin"), simulator="http",
        simulator_url=os.environ.get("CTOM_SIMULATOR_URL", "http://127.0.0.1:8000/v1"),
        simulator_model="Qwen/Qwen3-32B-FP8",
        controller=ControllerSettings(w_effort=W_EFFORT, max_rounds=d.max_rounds),
        pred_rows=0, pred_row_len=8192, eval_conversations=8, reuse_cache=False)


def tiny_config() -> Config:
    """The CPU default (`configs/ctom_tiny.py`): the packing domain with a tiny decoder trained
    from scratch, a format warm-up (the label-free teacher's conversations), then GRPO with the
    eta-capped prediction NLL. Two visible rounds for every method (the last gets no reply, as
    in the paper), two hidden revisions; a group's reward std counts as at least 0.1 (under a
    slot's 0.25), so a group whose scores tie is not driven by the 0.01-weighted effort alone."""
    return Config(
        model=ModelSection(path="", family="qwen3", vocab_size=768, hidden_size=96,
                           intermediate_size=256, num_layers=3, num_heads=4, num_kv_heads=2,
                           head_dim=24, qk_norm=False, initializer_range=0.1),
        step=StepConfig(learning_rate=5e-4, warmup_steps=5, kl_coef=0.0,
                        weight_decay=0.0, lambda_pred=1.0, max_grad_norm=1.0,
                        end_lr_ratio=1.0),
        trainer=TrainerConfig(workdir="runs/ctom_tiny", total_steps=60, prompts_per_step=8,
                              # rows hold the longest rounds with room to spare: a direct
                              # round at the equal budget (66-token answers) reaches 332
                              # tokens with ctom.controller.max_rounds=4 (test_packing)
                              group_size=8, max_new_tokens=8, row_len=384, temperature=1.0,
                              checkpoint_every=20, progress=True, advantage_std_floor=0.1),
        ctom=CToMSettings(
            domain="packing", num_tasks=256, eval_tasks=64, simulator="scripted",
            controller=ControllerSettings(max_rounds=2, max_revisions=2, plan_cap=4,
                            ask_cap=8, draft_cap=10, revision_cap=10, prediction_cap=12,
                            categorical=False),
            pred_rows=96, pred_row_len=256, eval_conversations=4, sampler_min_rows=64,
            sampler_min_slots=256),
    )
