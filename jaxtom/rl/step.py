"""One jitted GRPO update per rollout batch: `(TrainState, Batch) -> (TrainState, metrics)`.

A rollout batch is split into `ppo_mini_batches` mini-batches, and each of `ppo_epochs`
epochs takes one optimiser update per mini-batch (a `lax.scan` inside the one program), with
old log-probs scored once by the rollout policy so the ratio and both clips act from the
second update on. Rows are padded (never rejected) to what the mesh and the mini-batches
need: each mini-batch splits evenly over the data x fsdp devices, so a rollout batch pads to
a multiple of data x fsdp x ppo_mini_batches, not of the slice times the micro-batches
(`batch.update_rows`); padding rows carry no mask and change nothing.

Each update takes two gradients from two forwards: g_grpo of `L_GRPO - lambda_H H` on the
mini-batch's policy rows, g_pred of `L_pred` on its prediction rows, caps the latter with
eta (CToM eq. 7), then clips by global norm and applies AdamW. Losses are token means over
the mini-batch (as verl / EasyR1 take them), accumulated as sums over micro-batches and
divided by counts taken from the whole mini-batch, so any micro-batch split gives the same
update. `micro_batches` is therefore a cap, a memory knob: a device holding fewer rows of a
mini-batch than the cap takes one micro-batch per row, chosen from the shapes when the
program is compiled. Policy rows and prediction rows are split separately (their two
gradients come from separate forwards), each with its own micro-batch count. A mini-batch
with nothing to learn from (or non-finite gradients) leaves params and optimiser state
untouched.

Log-probs come from the decoder's final hidden states through `logprobs`: only the positions a
loss reads (policy and decision tokens, prediction targets) are scored, a vocabulary chunk at
a time, so no [B, T, V] logits are formed. How many positions a row may score is a static
width, read from the batch's masks on the host when the step is called and bucketed
(`logprobs.bucket_width`), so a run compiles a bounded number of programs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.models.decoder import Decoder
from jaxtom.sampling.weights import samples_a_copy, sampling_params
from jaxtom.rl import logprobs, losses
from jaxtom.rl.batch import Batch, batch_images, merge_rows, pad_rows_to, split_rows
from jaxtom.rl.gradients import (accumulate, as_float32, combine_gradients,
                                 compensated_add, global_norm)
from jaxtom.rl.placement import RowPlacement
from jaxtom.rl.step_config import (
    REFERENCES, StepConfig, TrainState, make_optimizer, make_schedule)
from jaxtom.rl.widths import score_widths, scored_positions

class Learner(RowPlacement):
    """Owns the static parts of training (graph, optimiser, mesh) and the compiled step;
    `total_steps`: rollout batches the learning-rate schedule spans (`trainer.total_steps`)."""

    def __init__(self, model: Decoder, cfg: StepConfig, mesh: Mesh | None = None,
                 rules: dict | None = None, *, total_steps: int):
        for name in ("micro_batches", "ppo_mini_batches", "ppo_epochs"):
            value = getattr(cfg, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"StepConfig.{name} must be a positive int, got {value!r}")
        ref = cfg.resolved_reference()
        if ref not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES + ('auto',)}, got {ref!r}")
        if cfg.lora and not model.text_decoder.layers.lora_scale:
            raise ValueError("lora=True but the model has no LoRA adapters; call "
                             "jaxtom.models.add_lora(model, rank=...) first")
        if cfg.freeze_vision and model.vision_params is nnx.Nothing:
            raise ValueError("freeze_vision=True but the model has no vision tower")
        if ref == "lora_disabled" and not cfg.lora:
            raise ValueError("reference='lora_disabled' needs lora=True")
        self.cfg, self.reference = cfg, ref
        self.mesh = mesh if mesh is not None else parallel.make_mesh(
            1, 1, 1, devices=jax.devices()[:1])
        self.rules = rules
        self.tx = make_optimizer(cfg)
        self.schedule = make_schedule(cfg, total_steps)
        self.graphdef, _, _ = self._split(model)
        self._compiled: dict[Any, Any] = {}

    def _split(self, model):
        trained = nnx.LoRAParam if self.cfg.lora else nnx.Param
        if self.cfg.freeze_vision:
            trained = nnx.All(trained, nnx.Not(model.vision_params))
        return nnx.split(model, trained, ...)

    # ---- state -------------------------------------------------------------------------
    def init_state(self, model: Decoder, seed: int = 0) -> TrainState:
        """A TrainState for `model`, created in its sharded place on the mesh.

        The trained params are copied (the model keeps its own arrays), and the copy, the
        frozen reference and the optimiser state are written shard by shard by one compiled
        program, so no device ever holds more than its share of them. Frozen weights (the
        base under LoRA) are not copied: they stay where the model has them, or are placed
        on the mesh once."""
        _, params, frozen = self._split(model)
        rng = jax.random.key_data(jax.random.key(seed))

        def build(params):
            copy = jax.tree.map(jnp.copy, params)  # a new buffer, never the model's
            ref = jax.tree.map(jnp.copy, params) if self.reference == "frozen_copy" else None
            opt_state = self.tx.init(as_float32(params))  # Adam moments float32 in every mode
            if self.cfg.compensated_updates:
                opt_state = (opt_state, jax.tree.map(jnp.zeros_like, params))
            return TrainState(step=jnp.int32(0), params=copy, frozen=None, ref_params=ref,
                              opt_state=opt_state, rng=rng)

        shardings = self.state_shardings(jax.eval_shape(build, params))
        params = jax.device_put(params, shardings.params)  # no-op where already placed
        frozen = jax.device_put(frozen, self.state_shardings(frozen))
        state = jax.jit(build, out_shardings=shardings)(params)
        return state.replace(frozen=frozen)

    def model(self, state: TrainState) -> Decoder:
        return nnx.merge(self.graphdef, state.params, state.frozen)

    def sampling_model(self, state: TrainState) -> Decoder:
        """The model rollouts sample from: `model(state)` with its weights in the compute
        dtype (`jaxtom.sampling.weights.sampling_params`; the same model when the dtypes agree)."""
        model = self.model(state)
        cfg = model.config
        if not samples_a_copy(cfg):
            return model
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        return nnx.merge(graphdef, sampling_params(params, cfg), rest)

    # ---- the update --------------------------------------------------------------------
    def update(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict]:
        """All optimiser updates for one rollout batch, as one compiled program.

        Compiled once per batch structure, shapes and scoring width (`program`); `state` is
        donated. Rows not padded as `row_split` asks are padded inside the program
        (`put_batch` pads first, so its arrays arrive sharded). With several updates per
        batch, `batch.old_logp` (the sampler's log-probs) is used as given, and scored by the
        current params when None.
        """
        return self.program(state, batch)(state, batch)

    def program(self, state: TrainState, batch: Batch, *, every_position: bool = False):
        """The jitted update `update` runs on `(state, batch)` (for `.lower(...)`: memory
        analysis, FLOPs); one per batch structure, shapes and scoring widths. With
        `every_position` it scores every position, the most a batch of these shapes can
        need (what a memory plan of abstract batches wants: their masks have no values)."""
        widths = None if every_position else score_widths(batch)
        key = (jax.tree.structure(batch),
               tuple((x.shape, str(x.dtype)) for x in jax.tree.leaves(batch)), widths)
        if key not in self._compiled:
            state_sh = self.state_shardings(state)
            rep = NamedSharding(self.mesh, PartitionSpec())
            def update(s, b):
                return self._update(s, b, widths)

            # named with its static scoring widths: compile logs and profiles tell the
            # programs of one batch shape apart (update_w256, update_w256_p64; update when
            # every position is scored)
            update.__name__ = update.__qualname__ = "update" + (
                "" if widths is None else f"_w{widths[0]}" + (f"_p{widths[1]}" if widths[1]
                                                              else ""))
            self._compiled[key] = jax.jit(
                update, in_shardings=(state_sh, self.batch_shardings(batch)),
                out_shardings=(state_sh, rep), donate_argnums=(0,))
        return self._compiled[key]

    @property
    def program_count(self) -> int:
        """How many update programs this learner has built (each compiles on first use)."""
        return len(self._compiled)

    def _logprobs(self, params, frozen, tokens, positions, segments, scored=None, width=None,
                  entropy=False, images=None, parents=None):
        """(log-probs, entropies or None) [B, T] of `tokens`, aligned like
        `losses.token_logprobs`, scoring only `scored` entries (at most `width` per row; all
        entries when None). Activations are sharded like the batch rows over the mesh (the
        decoder rematerialises its layers as its config says). `images`: (image_index,
        vision) of image+text rows (`batch.batch_images`), for a vision-language model. `parents`:
        shared-prompt rows' `parent_ids`."""
        model = nnx.merge(self.graphdef, params, frozen)
        extra = {} if images is None else model.row_inputs(positions, *images)
        if extra:
            positions = extra.pop("positions")
        if parents is not None:
            if extra:
                raise ValueError("shared-prompt rows (parent_ids) are for text rows only")
            extra["parent_ids"] = parents
        hidden = model(tokens, positions, segments, mesh=self.mesh, rules=self.rules,
                       return_hidden=True, **extra)
        head, vocab_axis = model.head_weight()
        return logprobs.token_logprobs_from_hidden(hidden, head, tokens, vocab_axis=vocab_axis,
                                                   scored=scored, width=width, entropy=entropy)

    def _reference_params(self, state, params):
        return (state.ref_params if self.reference == "frozen_copy"
                else jax.tree.map(jnp.zeros_like, params))  # lora_disabled: zero adapters

    def _reference_logp(self, state, params, mb: Batch, ref_in_batch: bool, width: int):
        if self.reference == "none":
            return None
        if self.reference == "batch" or ref_in_batch:
            if mb.ref_logp is None:
                raise ValueError("reference='batch' needs batch.ref_logp")
            return mb.ref_logp
        logp, _ = self._logprobs(self._reference_params(state, params), state.frozen, mb.tokens,
                                 mb.positions, mb.segment_ids, scored_positions(mb), width,
                                 images=batch_images(mb), parents=mb.parent_ids)
        return jax.lax.stop_gradient(logp)

    def _policy_grads(self, state, params, mb: Batch, counts, ref_in_batch: bool, width):
        """(g_grpo, stats) of one micro-batch of policy rows: its share of the mini-batch's
        token-mean objective (sums divided by the whole mini-batch's `counts`)."""
        cfg = self.cfg
        n_policy, n_decision, _ = counts
        ref_logp = self._reference_logp(state, params, mb, ref_in_batch, width)

        def grpo_objective(params):
            logp, entropy = self._logprobs(params, state.frozen, mb.tokens, mb.positions,
                                           mb.segment_ids, scored_positions(mb), width,
                                           entropy=mb.decision_mask is not None,
                                           images=batch_images(mb), parents=mb.parent_ids)
            old = jax.lax.stop_gradient(logp) if mb.old_logp is None else mb.old_logp
            total, _, stats = losses.grpo_terms(
                logp, old, ref_logp, mb.advantages, mb.policy_mask, clip_low=cfg.clip_low,
                clip_high=cfg.clip_high, dual_clip=cfg.dual_clip,
                kl_coef=cfg.kl_coef if ref_logp is not None else 0.0)
            objective = total / jnp.maximum(n_policy, 1.0)
            stats = dict(stats, grpo=objective)
            if mb.decision_mask is not None:
                ent, _ = losses.decision_entropy_terms(entropy, mb.decision_mask)
                stats["entropy"] = ent
                objective = objective - cfg.lambda_entropy * ent / jnp.maximum(n_decision, 1.0)
            return objective, stats

        (_, stats), g_grpo = jax.value_and_grad(grpo_objective, has_aux=True)(params)
        return g_grpo, stats

    def _pred_grads(self, state, params, p, n_targets, pwidth):
        """(L_pred share, g_pred) of one micro-batch of prediction rows."""
        def pred_objective(params):
            logp, _ = self._logprobs(params, state.frozen, p.tokens, p.positions,
                                     p.segment_ids, p.target_mask > 0, pwidth)
            total, _ = losses.prediction_terms(logp, p.target_mask)
            return total / jnp.maximum(n_targets, 1.0)

        return jax.value_and_grad(pred_objective)(params)

    def _uses_prediction(self, batch: Batch) -> bool:
        return batch.prediction is not None and self.cfg.lambda_pred != 0

    def _gradients(self, state: TrainState, params, batch: Batch, widths,
                   ref_in_batch: bool = False):
        """(combined, eta, g_grpo, g_pred or None, counts, stats): one update's gradient rule
        on `batch` (a whole mini-batch; token means over it, however it is micro-split)."""
        cfg = self.cfg
        n_policy = jnp.sum(batch.policy_mask)
        n_decision = (jnp.sum(batch.decision_mask) if batch.decision_mask is not None
                      else jnp.float32(0))
        n_targets = (jnp.sum(jnp.any(batch.prediction.target_mask > 0, axis=-1))
                     .astype(jnp.float32) if batch.prediction is not None else jnp.float32(0))
        counts = (n_policy, n_decision, n_targets)
        width, pwidth = widths
        g_grpo, stats = accumulate(
            lambda mb: self._policy_grads(state, params, mb, counts, ref_in_batch, width),
            batch.replace(prediction=None), self._micro(batch.tokens.shape[0]))
        g_pred = None
        if self._uses_prediction(batch):
            p = batch.prediction
            stats["pred"], g_pred = accumulate(
                lambda mb: self._pred_grads(state, params, mb, n_targets, pwidth), p,
                self._micro(p.tokens.shape[0]))
        if g_pred is not None:
            combined, eta = combine_gradients(g_grpo, g_pred, cfg.lambda_pred)
        else:
            combined, eta = g_grpo, jnp.float32(1.0)
        return combined, eta, g_grpo, g_pred, counts, stats

    def gradients(self, state: TrainState, batch: Batch):
        """One update's (combined gradient, eta, g_grpo, g_pred) on the whole batch (as a
        single mini-batch), without updating anything."""
        widths = score_widths(batch)
        key = ("grads", jax.tree.structure(batch), widths)
        if key not in self._compiled:
            self._compiled[key] = jax.jit(
                lambda s, b: self._gradients(s, s.params, self._pad(b, 1), widths)[:4])
        return self._compiled[key](state, batch)

    def _score(self, params, frozen, rows: Batch, width: int) -> jax.Array:
        """Log-probs of `rows` [R, T] at their scored positions (no gradient), one
        micro-batch at a time."""
        m = self._micro(rows.tokens.shape[0])
        micro = split_rows((rows.tokens, rows.positions, rows.segment_ids, scored_positions(rows),
                            batch_images(rows), rows.parent_ids), m)
        out = jax.lax.map(lambda t: self._logprobs(params, frozen, *t[:4], width,
                                                   images=t[4], parents=t[5])[0], micro)
        return jax.lax.stop_gradient(merge_rows(out))

    def _score_rollout(self, state: TrainState, minis: Batch, width: int) -> tuple[Batch, bool]:
        """Old (rollout-policy) and reference log-probs, scored once before any update.

        Only for several updates per batch: with one update the ratio is 1 by construction
        and the reference is cheaper computed inside the gradient's micro-batches.
        """
        score = lambda params, b: jax.lax.map(  # noqa: E731
            lambda r: self._score(params, state.frozen, r, width), b)
        if minis.old_logp is None:
            minis = minis.replace(old_logp=score(state.params, minis))
        if self.reference in ("frozen_copy", "lora_disabled"):
            ref = score(self._reference_params(state, state.params), minis)
            return minis.replace(ref_logp=ref), True
        return minis, False

    def _pad(self, batch: Batch, mini_batches: int) -> Batch:
        """`batch` padded as `row_split` asks for `mini_batches` mini-batches (static)."""
        p = batch.prediction
        return pad_rows_to(batch, self.row_split(batch.tokens.shape[0], mini_batches)[0],
                           None if p is None else self.row_split(p.tokens.shape[0],
                                                                 mini_batches)[0])

    def _apply(self, state, params, opt_state, mini: Batch, lr, ref_in_batch, widths):
        """One optimiser update on one mini-batch: (params, opt_state, metrics)."""
        cfg = self.cfg
        combined, eta, g_grpo, g_pred, counts, stats = self._gradients(state, params, mini,
                                                                       widths, ref_in_batch)
        n_policy, n_decision, n_targets = counts
        pred_norm = global_norm(g_pred) if g_pred is not None else jnp.float32(0.0)
        grad_norm = global_norm(combined)
        has_signal = (n_policy > 0) | (n_targets > 0) | ((n_decision > 0) &
                                                          (cfg.lambda_entropy != 0))
        apply = has_signal & jnp.isfinite(grad_norm)

        def optimiser_step(current):
            params, opt_state = current
            adam_state, comp = opt_state if cfg.compensated_updates else (opt_state, None)
            direction, new_opt = self.tx.update(as_float32(combined), adam_state, params)
            delta = jax.tree.map(lambda d: -lr * d, direction)
            if comp is None:
                return optax.apply_updates(params, delta), new_opt
            new_params, comp = compensated_add(params, comp, delta)
            return new_params, (new_opt, comp)

        # a skipped update (no signal, or a non-finite gradient) leaves params and optimiser
        # state as they were. A branch rather than a select of new against old: the select
        # needs the new params and moments whole beside the old ones (+0.7x the params'
        # bytes at Qwen3-8B's shape), the branch updates them in place.
        new_params, new_opt = jax.lax.cond(apply, optimiser_step, lambda current: current,
                                           (params, opt_state))

        denom = jnp.maximum(n_policy, 1.0)
        metrics = {
            "loss_grpo": stats["grpo"], "grad_norm_grpo": global_norm(g_grpo),
            "grad_norm_pred": pred_norm, "grad_norm": grad_norm, "eta": eta,
            "kl": stats["kl"] / denom, "clip_frac": stats["clip"] / denom,
            "dual_clip_frac": stats["dual_clip"] / denom,
            "policy_tokens": n_policy, "skipped": 1.0 - apply.astype(jnp.float32),
            "learning_rate": lr,
        }
        if "entropy" in stats:
            metrics["entropy"] = stats["entropy"] / jnp.maximum(n_decision, 1.0)
        if "pred" in stats:
            metrics["loss_pred"] = stats["pred"]
        metrics = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), metrics)
        return new_params, new_opt, metrics

    def _update(self, state: TrainState, batch: Batch, widths=None):
        """The update program; `widths` None scores every position (the most a batch of
        these shapes can need, which is what a memory plan wants)."""
        cfg = self.cfg
        if widths is None:
            p = batch.prediction
            widths = (batch.tokens.shape[1], 0 if p is None else p.tokens.shape[1])
        n, updates = cfg.ppo_mini_batches, cfg.updates_per_batch
        batch = self._pad(batch, n)
        minis = split_rows(batch, n)  # [n, rows / n, ...]; prediction rows split alike
        ref_in_batch = False
        if updates > 1:
            minis, ref_in_batch = self._score_rollout(state, minis, widths[0])

        def body(carry, u):
            params, opt_state = carry
            mini = jax.tree.map(lambda x: x[u % n], minis)  # epoch u // n, mini-batch u % n
            lr = self.schedule(state.step * updates + u)
            params, opt_state, metrics = self._apply(state, params, opt_state, mini, lr,
                                                     ref_in_batch, widths)
            return (params, opt_state), metrics

        carry = (state.params, state.opt_state)
        if updates == 1:  # no loop around the common single update
            (params, opt_state), metrics = body(carry, jnp.int32(0))
            per_update = jax.tree.map(lambda x: x[None], metrics)
        else:
            (params, opt_state), per_update = jax.lax.scan(body, carry, jnp.arange(updates))
        metrics = {k: jnp.mean(v) for k, v in per_update.items()}
        metrics["policy_tokens"] = jnp.sum(batch.policy_mask).astype(jnp.float32)
        metrics["clip_frac_last"] = per_update["clip_frac"][-1]
        metrics["dual_clip_frac_last"] = per_update["dual_clip_frac"][-1]
        metrics["updates"] = jnp.float32(updates)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        return new_state, metrics

    # ---- scoring (old / reference log-probs for multi-epoch updates) ---------------------
    def logprobs(self, state: TrainState, batch: Batch) -> jax.Array:
        """Per-token log-probs of `batch.tokens` under the current params (no gradient)."""
        if "score" not in self._compiled:
            self._compiled["score"] = jax.jit(
                lambda s, t, p, g, i, r: self._logprobs(s.params, s.frozen, t, p, g, images=i,
                                                        parents=r)[0])
        return self._compiled["score"](state, batch.tokens, batch.positions, batch.segment_ids,
                                       batch_images(batch), batch.parent_ids)
