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

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.models.config import ModelConfig
from jaxtom.models.decoder import Decoder, sampling_params
from jaxtom.rl import logprobs, losses
from jaxtom.rl.batch import Batch, merge_rows, pad_rows_to, split_rows, update_rows
from jaxtom.rl.gradients import combine_gradients, compensated_add, global_norm

REFERENCES = ("frozen_copy", "lora_disabled", "batch", "none")


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """Static hyperparameters of the update (hashable: part of what gets compiled).

    `warmup_steps` and `total_steps` count rollout batches (`Learner.update` calls, the
    trainer's step); the LR schedule itself runs over optimiser updates, of which there are
    `updates_per_batch = ppo_epochs * ppo_mini_batches` per rollout batch, so update u of
    batch s uses lr = schedule(s * updates_per_batch + u) on a schedule that is
    `total_steps * updates_per_batch` updates long (`make_schedule`).

    Precision (the model's `param_dtype` / `compute_dtype`; log-probs, losses, gradient
    norms and Adam moments are float32 in every mode). Persistent bytes per trained
    parameter, + the frozen reference copy (KL, reference='frozen_copy') + the transient
    gradient:
      - float32 params, bf16 compute (the default to use): 4 + 8 (Adam m, v) = 12,
        + 4 reference + 4 gradient. Weights are cast to bf16 at use; updates of 1e-6 keep.
      - bfloat16 params: 2 + 8 = 10, + 2 + 2. Updates below half a bf16 spacing (~6e-5 at
        |w| ~ 1e-2) round away: one lr-1e-6 update changes ~2% of the weights, not ~98%.
      - bfloat16 params, compensated_updates=True: 2 + 2 (compensation) + 8 = 12, + 2 + 2.
        Kahan summation carries what rounding lost, so small updates accumulate (as the
        compensated bf16 AdamW behind EasyR1's adamw_bf16 does); it saves only the
        reference's and the gradients' bytes.
    """
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
    # gradient accumulation inside one update, at most this many micro-batches (fewer when a
    # device holds fewer rows of a mini-batch); the same update for any value
    micro_batches: int = 1
    ppo_mini_batches: int = 1  # optimiser updates per rollout batch and epoch
    ppo_epochs: int = 1  # passes over the rollout batch
    # bf16 (param_dtype) weights: add each update with Kahan compensation (see below)
    compensated_updates: bool = False
    lora: bool = False  # train only the LoRA adapters (the model must carry them)
    # a vision-language policy's vision tower (parameters under `visual`) stays as loaded;
    # False trains it, as the public MindZero config does
    freeze_vision: bool = False
    reference: str = "auto"  # frozen_copy | lora_disabled | batch | none | auto

    @property
    def updates_per_batch(self) -> int:
        return self.ppo_epochs * self.ppo_mini_batches

    def resolved_reference(self) -> str:
        if self.reference != "auto":
            return self.reference
        if self.kl_coef == 0:
            return "none"
        return "lora_disabled" if self.lora else "frozen_copy"


@struct.dataclass
class TrainState:
    step: jax.Array  # int32: rollout batches (`Learner.update` calls) so far
    params: Any  # trainable nnx.State (all params, or only the LoRA adapters)
    frozen: Any  # the rest of the model (base weights under LoRA; empty otherwise)
    ref_params: Any  # frozen copy of the initial trainable params, or None
    opt_state: Any
    rng: jax.Array  # uint32 raw key data, for the trainer's sampling


def make_schedule(cfg: StepConfig):
    """Warmup + cosine LR as a function of the optimiser-update index (not the rollout step)."""
    u = cfg.updates_per_batch
    warmup, total = cfg.warmup_steps * u, cfg.total_steps * u
    return optax.warmup_cosine_decay_schedule(
        0.0 if warmup else cfg.learning_rate, cfg.learning_rate,
        warmup, max(total, warmup + 1), cfg.learning_rate * cfg.end_lr_ratio)


def make_optimizer(cfg: StepConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW's direction (Adam + decoupled weight decay).

    The learning rate is left out: the step multiplies by -schedule(update index) itself, so
    the schedule follows the explicit update counter (state.step * updates_per_batch + u)
    rather than Adam's count, which skipped (empty or non-finite) updates do not advance.
    `params - lr * direction` is exactly optax.adamw's update.
    """
    return optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.scale_by_adam(b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps),
        optax.add_decayed_weights(cfg.weight_decay))


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


def _as_float32(tree):
    return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def _local_rows(x) -> dict:
    """This process's rows of a [R, T] array as NumPy, keyed by their row range."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return {(s.index[0].start, s.index[0].stop): np.asarray(s.data)
                for s in x.addressable_shards}
    return {(None, None): np.asarray(x)}


def _max_scored(*masks) -> int:
    """Most entries any row scores: positions past the first where any of `masks` (None
    skipped) is nonzero, over every process's rows (all processes must call it)."""
    parts = [_local_rows(m) for m in masks if m is not None]
    local = 0
    for key in parts[0]:
        hit = np.logical_or.reduce([p[key] > 0 for p in parts])
        local = max(local, int(hit[:, 1:].sum(axis=1).max(initial=0)))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        local = int(np.max(multihost_utils.process_allgather(np.asarray([local]))))
    return local


def score_widths(batch: Batch) -> tuple[int, int]:
    """Static (policy-row, prediction-row) scoring widths of `batch` (see module docstring)."""
    width = logprobs.bucket_width(_max_scored(batch.policy_mask, batch.decision_mask),
                                  batch.tokens.shape[1])
    p = batch.prediction
    pwidth = 0 if p is None else logprobs.bucket_width(_max_scored(p.target_mask),
                                                       p.tokens.shape[1])
    return width, pwidth


def _images(batch: Batch):
    """(image_index, vision) of image+text rows, or None for text rows."""
    return None if batch.vision is None else (batch.image_index, batch.vision)


def _scored(batch: Batch) -> jax.Array:
    """Positions a policy row's losses read: policy tokens and decision tokens."""
    hit = batch.policy_mask > 0
    return hit if batch.decision_mask is None else hit | (batch.decision_mask > 0)


def _accumulate(fn, tree, micro: int):
    """The sum of `fn` over `micro` interleaved row splits of `tree` (a scan; no loop for 1)."""
    if micro == 1:
        return fn(tree)
    parts = split_rows(tree, micro)
    shapes = jax.eval_shape(fn, jax.tree.map(lambda x: x[0], parts))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def body(acc, part):
        return jax.tree.map(jnp.add, acc, fn(part)), None

    return jax.lax.scan(body, zeros, parts)[0]


class Learner:
    """Owns the static parts of training (graph, optimiser, mesh) and the compiled step."""

    def __init__(self, model: Decoder, cfg: StepConfig, mesh: Mesh | None = None,
                 rules: dict | None = None):
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
        self.schedule = make_schedule(cfg)
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
            opt_state = self.tx.init(_as_float32(params))  # Adam moments float32 in every mode
            if self.cfg.compensated_updates:
                opt_state = (opt_state, jax.tree.map(jnp.zeros_like, params))
            return TrainState(step=jnp.int32(0), params=copy, frozen=None, ref_params=ref,
                              opt_state=opt_state, rng=rng)

        shardings = self.state_shardings(jax.eval_shape(build, params))
        params = jax.device_put(params, shardings.params)  # no-op where already placed
        frozen = jax.device_put(frozen, self.state_shardings(frozen))
        state = jax.jit(build, out_shardings=shardings)(params)
        return state.replace(frozen=frozen)

    def state_shardings(self, state: TrainState):
        return _tree_shardings(state, self.mesh, self.rules)

    def batch_shardings(self, batch: Batch):
        return jax.tree.map(lambda x: parallel.batch_sharding(self.mesh, x.ndim, x.shape[0]),
                            batch)

    @property
    def data_parallel(self) -> int:
        """Devices the batch rows are split over: data x fsdp."""
        return self.mesh.shape["data"] * self.mesh.shape["fsdp"]

    @property
    def row_multiple(self) -> int:
        """Every padded row count (policy or prediction rows) is a multiple of this: data x
        fsdp x ppo_mini_batches; `row_split` gives the exact count."""
        return self.data_parallel * self.cfg.ppo_mini_batches

    def row_split(self, rows: int, mini_batches: int | None = None,
                  multiple_of: int = 1) -> tuple[int, int]:
        """(padded rows, micro-batches) the update uses for `rows` policy (or prediction)
        rows split into `mini_batches` (default `ppo_mini_batches`): `batch.update_rows`
        with `micro_batches` as the cap."""
        n = self.cfg.ppo_mini_batches if mini_batches is None else mini_batches
        return update_rows(rows, self.data_parallel, n, self.cfg.micro_batches,
                           multiple_of=multiple_of)

    def padded_rows(self, rows: int) -> int:
        """How many rows an update of `rows` policy (or prediction) rows computes."""
        return self.row_split(rows)[0]

    def _micro(self, rows: int) -> int:
        """Micro-batches of a mini-batch of `rows` rows (already padded: a fixed point)."""
        padded, micro = self.row_split(rows, 1)
        if padded != rows:
            raise ValueError(f"a mini-batch of {rows} rows is not padded for the mesh "
                             f"({self.data_parallel} data x fsdp devices): expected {padded}")
        return micro

    def put_batch(self, local_batch: Batch) -> Batch:
        """Global batch from this process's rows (all rows on a single process), padded.

        Processes whose rollouts packed into different row counts agree on the largest
        (one small host all-gather); the global count is `row_split` of that times the
        processes (kept a multiple of them), and each process pads its rows to its equal
        block of it. Padding rows carry no mask, so a process with fewer real rows simply
        holds more padding.
        """
        nproc = jax.process_count()
        rows = local_batch.tokens.shape[0]
        prows = 0 if local_batch.prediction is None else local_batch.prediction.tokens.shape[0]
        if nproc > 1:
            from jax.experimental import multihost_utils
            counts = np.asarray(multihost_utils.process_allgather(np.asarray([rows, prows])))
            rows, prows = (int(c) for c in counts.reshape(-1, 2).max(axis=0))
        total = self.row_split(rows * nproc, multiple_of=nproc)[0]
        ptotal = self.row_split(prows * nproc, multiple_of=nproc)[0]
        local = pad_rows_to(jax.tree.map(np.asarray, local_batch), total // nproc,
                            None if local_batch.prediction is None else ptotal // nproc)
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(
                parallel.batch_sharding(self.mesh, x.ndim, x.shape[0] * nproc), x),
            local)

    def put_global_batch(self, batch: Batch) -> Batch:
        """Global batch from the whole batch, which every process holds alike: padded at
        its end as one process would pad it, each process placing its block of rows. The
        rows, and so the PPO mini-batches, are then those of a single process."""
        nproc = jax.process_count()
        if nproc == 1:
            return self.put_batch(batch)
        rows = batch.tokens.shape[0]
        prows = 0 if batch.prediction is None else batch.prediction.tokens.shape[0]
        total = self.row_split(rows, multiple_of=nproc)[0]
        ptotal = None if batch.prediction is None else self.row_split(
            prows, multiple_of=nproc)[0]
        whole = pad_rows_to(jax.tree.map(np.asarray, batch), total, ptotal)
        me = jax.process_index()
        local = jax.tree.map(lambda x: x[me * (x.shape[0] // nproc):
                                         (me + 1) * (x.shape[0] // nproc)], whole)
        return self.put_batch(local)

    def model(self, state: TrainState) -> Decoder:
        return nnx.merge(self.graphdef, state.params, state.frozen)

    def sampling_model(self, state: TrainState) -> Decoder:
        """The model rollouts sample from: `model(state)` with its weights in the compute
        dtype (`decoder.sampling_params`; the same model when the dtypes agree)."""
        model = self.model(state)
        cfg = model.config
        if not isinstance(cfg, ModelConfig) or cfg.compute_dtype == cfg.param_dtype:
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
            def update(s, b):  # named: compile logs and profiles say which program
                return self._update(s, b, widths)

            self._compiled[key] = jax.jit(
                update, in_shardings=(state_sh, self.batch_shardings(batch)),
                out_shardings=(state_sh, rep), donate_argnums=(0,))
        return self._compiled[key]

    def step(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict]:
        """Alias of `update` (the name existing callers use)."""
        return self.update(state, batch)

    def _logprobs(self, params, frozen, tokens, positions, segments, scored=None, width=None,
                  entropy=False, images=None, parents=None):
        """(log-probs, entropies or None) [B, T] of `tokens`, aligned like
        `losses.token_logprobs`, scoring only `scored` entries (at most `width` per row; all
        entries when None). Activations are sharded like the batch rows over the mesh (the
        decoder rematerialises its layers as its config says). `images`: (image_index,
        vision) of image+text rows (`_images`), for a vision-language model. `parents`:
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
                                 mb.positions, mb.segment_ids, _scored(mb), width,
                                 images=_images(mb), parents=mb.parent_ids)
        return jax.lax.stop_gradient(logp)

    def _policy_grads(self, state, params, mb: Batch, counts, ref_in_batch: bool, width):
        """(g_grpo, stats) of one micro-batch of policy rows: its share of the mini-batch's
        token-mean objective (sums divided by the whole mini-batch's `counts`)."""
        cfg = self.cfg
        n_policy, n_decision, _ = counts
        ref_logp = self._reference_logp(state, params, mb, ref_in_batch, width)

        def grpo_objective(params):
            logp, entropy = self._logprobs(params, state.frozen, mb.tokens, mb.positions,
                                           mb.segment_ids, _scored(mb), width,
                                           entropy=mb.decision_mask is not None,
                                           images=_images(mb), parents=mb.parent_ids)
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
        g_grpo, stats = _accumulate(
            lambda mb: self._policy_grads(state, params, mb, counts, ref_in_batch, width),
            batch.replace(prediction=None), self._micro(batch.tokens.shape[0]))
        g_pred = None
        if self._uses_prediction(batch):
            p = batch.prediction
            stats["pred"], g_pred = _accumulate(
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
        micro = split_rows((rows.tokens, rows.positions, rows.segment_ids, _scored(rows),
                            _images(rows), rows.parent_ids), m)
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
            direction, new_opt = self.tx.update(_as_float32(combined), adam_state, params)
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
                                       _images(batch), batch.parent_ids)
