"""One jitted GRPO update: `(TrainState, Batch) -> (TrainState, metrics)`.

The step takes two gradients from two forwards: g_grpo of `L_GRPO - lambda_H H` on the policy
rows, g_pred of `L_pred` on the prediction rows, caps the latter with eta (CToM eq. 7), then
clips by global norm and applies AdamW. Losses are accumulated as sums over micro-batches and
divided by counts taken from the whole batch, so any micro-batch split gives the same update.
A batch with nothing to learn from (or non-finite gradients) leaves params and optimiser
state untouched.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.models.decoder import Decoder
from jaxtom.rl import losses
from jaxtom.rl.batch import Batch
from jaxtom.rl.gradients import combine_gradients, global_norm

REFERENCES = ("frozen_copy", "lora_disabled", "batch", "none")


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """Static hyperparameters of the update (hashable: part of what gets compiled)."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 3.0
    kl_coef: float = 0.01
    lambda_pred: float = 0.0
    lambda_entropy: float = 0.0
    learning_rate: float = 1e-6
    warmup_steps: int = 0
    total_steps: int = 1000
    end_lr_ratio: float = 0.0
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    adam_eps: float = 1e-8
    micro_batches: int = 1
    lora: bool = False  # train only the LoRA adapters (the model must carry them)
    reference: str = "auto"  # frozen_copy | lora_disabled | batch | none | auto

    def resolved_reference(self) -> str:
        if self.reference != "auto":
            return self.reference
        if self.kl_coef == 0:
            return "none"
        return "lora_disabled" if self.lora else "frozen_copy"


@struct.dataclass
class TrainState:
    step: jax.Array  # int32: updates attempted so far
    params: Any  # trainable nnx.State (all params, or only the LoRA adapters)
    frozen: Any  # the rest of the model (base weights under LoRA; empty otherwise)
    ref_params: Any  # frozen copy of the initial trainable params, or None
    opt_state: Any
    rng: jax.Array  # uint32 raw key data, for the trainer's sampling


def make_schedule(cfg: StepConfig):
    decay = max(cfg.total_steps, cfg.warmup_steps + 1)
    return optax.warmup_cosine_decay_schedule(
        0.0 if cfg.warmup_steps else cfg.learning_rate, cfg.learning_rate,
        cfg.warmup_steps, decay, cfg.learning_rate * cfg.end_lr_ratio)


def make_optimizer(cfg: StepConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW on a warmup + cosine schedule."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.adamw(make_schedule(cfg), b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps,
                    weight_decay=cfg.weight_decay))


def _tree_shardings(tree, mesh: Mesh, rules=None):
    """Named shardings from variables' logical axes; anything else replicated."""
    rep = NamedSharding(mesh, PartitionSpec())

    def one(x):
        if isinstance(x, nnx.Variable):
            value = x.get_value()
            axes = parallel.variable_axes(x) or (None,) * value.ndim
            return x.replace(parallel.named_sharding(mesh, axes, value.shape, rules))
        return rep

    return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def _split_micro(tree, m: int):
    """[B, ...] leaves -> [m, B/m, ...], interleaved so each micro-batch spans every shard."""
    def one(x):
        if x.shape[0] % m:
            raise ValueError(f"batch dimension {x.shape[0]} is not divisible by "
                             f"micro_batches={m}")
        return jnp.swapaxes(x.reshape(x.shape[0] // m, m, *x.shape[1:]), 0, 1)
    return jax.tree.map(one, tree)


class Learner:
    """Owns the static parts of training (graph, optimiser, mesh) and the compiled step."""

    def __init__(self, model: Decoder, cfg: StepConfig, mesh: Mesh | None = None,
                 rules: dict | None = None):
        if cfg.micro_batches < 1:
            raise ValueError(f"micro_batches must be a positive int, got {cfg.micro_batches}")
        ref = cfg.resolved_reference()
        if ref not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES + ('auto',)}, got {ref!r}")
        if cfg.lora and not model.layers.lora_scale:
            raise ValueError("lora=True but the model has no LoRA adapters; call "
                             "jaxtom.models.add_lora(model, rank=...) first")
        if ref == "lora_disabled" and not cfg.lora:
            raise ValueError("reference='lora_disabled' needs lora=True")
        self.cfg, self.reference = cfg, ref
        self.mesh = mesh if mesh is not None else parallel.make_mesh(
            1, 1, 1, devices=jax.devices()[:1])
        self.rules = rules
        self.tx = make_optimizer(cfg)
        self.schedule = make_schedule(cfg)
        self.graphdef, _, _ = self._split(model)
        self._compiled: dict[Any, Any] = {}

    def _split(self, model):
        return nnx.split(model, nnx.LoRAParam if self.cfg.lora else nnx.Param, ...)

    # ---- state -------------------------------------------------------------------------
    def init_state(self, model: Decoder, seed: int = 0) -> TrainState:
        """A TrainState for `model`, placed on the mesh (params are copied, not aliased)."""
        _, params, frozen = self._split(model)
        params = jax.tree.map(jnp.array, params)
        ref = jax.tree.map(jnp.array, params) if self.reference == "frozen_copy" else None
        state = TrainState(step=jnp.int32(0), params=params, frozen=frozen, ref_params=ref,
                           opt_state=self.tx.init(params),
                           rng=jax.random.key_data(jax.random.key(seed)))
        return jax.device_put(state, self.state_shardings(state))

    def state_shardings(self, state: TrainState):
        return _tree_shardings(state, self.mesh, self.rules)

    def batch_shardings(self, batch: Batch):
        return jax.tree.map(lambda x: parallel.batch_sharding(self.mesh, x.ndim, x.shape[0]),
                            batch)

    def put_batch(self, local_batch: Batch) -> Batch:
        """Global batch from this process's rows (all rows on a single process)."""
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(
                parallel.batch_sharding(self.mesh, x.ndim, x.shape[0] * jax.process_count()),
                x),
            local_batch)

    def model(self, state: TrainState) -> Decoder:
        return nnx.merge(self.graphdef, state.params, state.frozen)

    # ---- the step ----------------------------------------------------------------------
    def step(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict]:
        """Runs one update; compiled once per batch structure and shapes, state donated."""
        key = jax.tree.structure(batch)
        if key not in self._compiled:
            state_sh = self.state_shardings(state)
            rep = NamedSharding(self.mesh, PartitionSpec())
            self._compiled[key] = jax.jit(
                self._update, in_shardings=(state_sh, self.batch_shardings(batch)),
                out_shardings=(state_sh, rep), donate_argnums=(0,))
        return self._compiled[key](state, batch)

    def _forward(self, params, frozen, tokens, positions, segments):
        model = nnx.merge(self.graphdef, params, frozen)
        return model(tokens, positions, segments)

    def _reference_logp(self, state, params, mb: Batch):
        if self.reference == "batch":
            if mb.ref_logp is None:
                raise ValueError("reference='batch' needs batch.ref_logp")
            return mb.ref_logp
        if self.reference == "none":
            return None
        ref = (state.ref_params if self.reference == "frozen_copy"
               else jax.tree.map(jnp.zeros_like, params))
        logits = self._forward(ref, state.frozen, mb.tokens, mb.positions, mb.segment_ids)
        return jax.lax.stop_gradient(losses.token_logprobs(logits, mb.tokens))

    def _micro_grads(self, state, mb: Batch, counts):
        cfg = self.cfg
        n_policy, n_decision, n_targets = counts
        ref_logp = self._reference_logp(state, state.params, mb)

        def grpo_objective(params):
            logits = self._forward(params, state.frozen, mb.tokens, mb.positions,
                                   mb.segment_ids)
            logp = losses.token_logprobs(logits, mb.tokens)
            old = jax.lax.stop_gradient(logp) if mb.old_logp is None else mb.old_logp
            total, _, stats = losses.grpo_terms(
                logp, old, ref_logp, mb.advantages, mb.policy_mask, clip_low=cfg.clip_low,
                clip_high=cfg.clip_high, dual_clip=cfg.dual_clip,
                kl_coef=cfg.kl_coef if ref_logp is not None else 0.0)
            objective = total / jnp.maximum(n_policy, 1.0)
            stats = dict(stats, grpo=objective)
            if mb.decision_mask is not None:
                ent, _ = losses.decision_entropy_terms(losses.token_entropy(logits),
                                                       mb.decision_mask)
                stats["entropy"] = ent
                objective = objective - cfg.lambda_entropy * ent / jnp.maximum(n_decision, 1.0)
            return objective, stats

        (_, stats), g_grpo = jax.value_and_grad(grpo_objective, has_aux=True)(state.params)
        g_pred = None
        if self._uses_prediction(mb):
            p = mb.prediction

            def pred_objective(params):
                logits = self._forward(params, state.frozen, p.tokens, p.positions,
                                       p.segment_ids)
                total, _ = losses.prediction_terms(losses.token_logprobs(logits, p.tokens),
                                                   p.target_mask)
                return total / jnp.maximum(n_targets, 1.0)

            stats["pred"], g_pred = jax.value_and_grad(pred_objective)(state.params)
        return g_grpo, g_pred, stats

    def _uses_prediction(self, batch: Batch) -> bool:
        return batch.prediction is not None and self.cfg.lambda_pred != 0

    def _gradients(self, state: TrainState, batch: Batch):
        """(combined, eta, g_grpo, g_pred or None, counts, stats): the step's gradient rule."""
        cfg = self.cfg
        n_policy = jnp.sum(batch.policy_mask)
        n_decision = (jnp.sum(batch.decision_mask) if batch.decision_mask is not None
                      else jnp.float32(0))
        n_targets = (jnp.sum(jnp.any(batch.prediction.target_mask > 0, axis=-1))
                     .astype(jnp.float32) if batch.prediction is not None else jnp.float32(0))
        counts = (n_policy, n_decision, n_targets)
        m = cfg.micro_batches
        if m == 1:
            g_grpo, g_pred, stats = self._micro_grads(state, batch, counts)
        else:
            micro = _split_micro(batch, m)
            first = jax.tree.map(lambda x: x[0], micro)
            shapes = jax.eval_shape(lambda b: self._micro_grads(state, b, counts), first)
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

            def body(acc, mb):
                out = self._micro_grads(state, mb, counts)
                return jax.tree.map(jnp.add, acc, out), None

            (g_grpo, g_pred, stats), _ = jax.lax.scan(body, zeros, micro)
        if g_pred is not None:
            combined, eta = combine_gradients(g_grpo, g_pred, cfg.lambda_pred)
        else:
            combined, eta = g_grpo, jnp.float32(1.0)
        return combined, eta, g_grpo, g_pred, counts, stats

    def gradients(self, state: TrainState, batch: Batch):
        """The step's (combined gradient, eta, g_grpo, g_pred) without updating anything."""
        if "grads" not in self._compiled:
            self._compiled["grads"] = jax.jit(lambda s, b: self._gradients(s, b)[:4])
        return self._compiled["grads"](state, batch)

    def _update(self, state: TrainState, batch: Batch):
        cfg = self.cfg
        combined, eta, g_grpo, g_pred, counts, stats = self._gradients(state, batch)
        n_policy, n_decision, n_targets = counts
        pred_norm = global_norm(g_pred) if g_pred is not None else jnp.float32(0.0)
        grad_norm = global_norm(combined)
        has_signal = (n_policy > 0) | (n_targets > 0) | ((n_decision > 0) &
                                                          (cfg.lambda_entropy != 0))
        apply = has_signal & jnp.isfinite(grad_norm)
        updates, new_opt = self.tx.update(combined, state.opt_state, state.params)
        new_params = optax.apply_updates(state.params, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(apply, a, b), new, old)  # noqa: E731
        new_state = state.replace(step=state.step + 1, params=keep(new_params, state.params),
                                  opt_state=keep(new_opt, state.opt_state))
        denom = jnp.maximum(n_policy, 1.0)
        metrics = {
            "loss_grpo": stats["grpo"], "grad_norm_grpo": global_norm(g_grpo),
            "grad_norm_pred": pred_norm, "grad_norm": grad_norm, "eta": eta,
            "kl": stats["kl"] / denom, "clip_frac": stats["clip"] / denom,
            "dual_clip_frac": stats["dual_clip"] / denom,
            "policy_tokens": n_policy, "skipped": 1.0 - apply.astype(jnp.float32),
            "learning_rate": self.schedule(state.step),
        }
        if "entropy" in stats:
            metrics["entropy"] = stats["entropy"] / jnp.maximum(n_decision, 1.0)
        if "pred" in stats:
            metrics["loss_pred"] = stats["pred"]
        return new_state, jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), metrics)

    # ---- scoring (old / reference log-probs for multi-epoch updates) ---------------------
    def logprobs(self, state: TrainState, batch: Batch) -> jax.Array:
        """Per-token log-probs of `batch.tokens` under the current params (no gradient)."""
        if "score" not in self._compiled:
            self._compiled["score"] = jax.jit(
                lambda s, t, p, g: losses.token_logprobs(self._forward(s.params, s.frozen, t, p,
                                                                       g), t))
        return self._compiled["score"](state, batch.tokens, batch.positions, batch.segment_ids)
