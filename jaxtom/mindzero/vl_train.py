"""MindZero SSRL with a vision-language policy: image observations through Qwen3-VL.

The same two phases on the same trainer as `jaxtom.mindzero.goals_text` (format warm-up, then
particle SSRL rewarded by eq. 4); what changes is what a prompt is. Each (episode, t) prompt
is the image observation's text (`image_observation`, Figure 7 with the rendered grid) with
its image placeholder expanded to the picture's token count, plus the picture itself.
Rollouts sample through `vl_sampling` (one jitted image+text prefill, then the text sampler)
and hand the update image+text rows (`rl.vl_batch`) that carry each row's picture, M-RoPE
positions and image-token index into the VL forward. Every picture of a run has the same
size (`mindzero.data.image_cell_size` px per cell), so the prefill and the update each
compile a bounded number of programs. The vision tower trains with the rest unless
`step.freeze_vision=true`.

`model.path` "" builds a tiny random Qwen3-VL from scratch (the CPU config) over a BPE
trained on the prompts' text with the three vision special tokens added; a path loads a
Qwen3-VL checkpoint (`jaxtom.models.from_pretrained`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import jax
import numpy as np

from jaxtom import storage
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero import goals_text
from jaxtom.mindzero.data import PromptCache, task_records
from jaxtom.mindzero.monitor import monitor_rows, monitor_scores
from jaxtom.mindzero.observation import HostEpisodes, observation_image
from jaxtom.mindzero.policy import Codec, load_bpe, train_bpe
from jaxtom.mindzero.reward import cumulative_log_likelihoods
from jaxtom.mindzero.task import Prepared
from jaxtom.mindzero.warmup import WarmupRollout, longest_teacher_target
from jaxtom.models import Qwen3VL, init_qwen3_vl
from jaxtom.models.image_processing import num_image_tokens, preprocess_image
from jaxtom.models.mrope import expand_image_tokens
from jaxtom.models.vl_config import VisionConfig, VLConfig
from jaxtom.models.vl_prompts import IMAGE_PAD, VISION_END, VISION_START
from jaxtom.rl import distributed
from jaxtom.rl.trainer import global_rollout, sample_rows
from jaxtom.rl.vl_batch import vl_rows
from jaxtom.sampling import vl as vl_sampling

PROBABILITY_MARKER = "0."
ANSWER_CLOSE = "}]}"  # the end of a Figure 7 answer (`particles.format_particles`)
PARTICLE_SEPARATOR = "},{"  # between two of its hypotheses
# the rest of a hypothesis's fixed text, one token each: the BPE's pre-tokenizer splits at
# every quote, so without these a hypothesis whose only choices are 2 colours, 2 shapes and a
# digit takes about twice the tokens, and every sampled and trained answer is twice as long
# as its content
ANSWER_PIECES = ('{"particles":[', '{"object1":{"color":"', '"object1":{"color":"',
                 '","shape":"', '"},"object2":{"color":"', '"},"p":')
# the tiny from-scratch vision tower (CPU config): 8x8 learned position table, 2 blocks; it
# reads pictures at their own size (rounded to 32 px), not upscaled to Qwen3-VL's 256x256
# floor: a 16 px cell is then one patch, and a 10x10 grid costs 100 patches and 25 tokens
# instead of 256 and 64
TINY_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                   num_position_embeddings=64, deepstack_visual_indexes=(0, 1),
                   min_pixels=32 * 32)


def _mrope_section(head_dim: int) -> tuple[int, int, int]:
    """Qwen3-VL's split of the rotary frequencies into (T, H, W) for a small head."""
    half = head_dim // 2
    return (half - 2 * (half // 3), half // 3, half // 3)


def build_vl_model(config, run_dir: Path, views=(), tokenizer_path=None, mesh=None):
    """(Qwen3VL, codec): a checkpoint (`model.path`), or a tiny random one from scratch;
    created or read straight into its shards on `mesh` when given."""
    m = config.model
    if m.path:
        model, codec = goals_text.build_model(config, run_dir, views, tokenizer_path, mesh)
        if not isinstance(model, Qwen3VL):
            raise ValueError(f"mindzero.data.observation='image' needs a Qwen3-VL checkpoint; "
                             f"model.path={m.path!r} is a text-only model")
        return model, codec
    path = storage.path(tokenizer_path or storage.path(run_dir) / "tokenizer.json")
    if tokenizer_path is None and not path.exists():
        rng = np.random.default_rng(config.trainer.seed)
        tok = train_bpe(goals_text.corpus(config, views, rng), m.vocab_size)
        tok.backend.add_special_tokens([VISION_START, IMAGE_PAD, VISION_END])
        # a probability's "0." as one token, where `trainer.explore_temperature` explores
        # (the text prompts' BPE merges it; the longer image prompts' BPE may not), and the
        # answer's closing brackets as one, so the last probability's digit stays a token of
        # its own: otherwise the short image prompts' BPE can write "0.4}]}" as "0." + "4}]}",
        # and the one-digit token exploration samples leaves answers that never close; the
        # same for the separator between hypotheses (otherwise "0.4},{" + the next opening
        # can be one token)
        tok.backend.add_tokens([PROBABILITY_MARKER, ANSWER_CLOSE, PARTICLE_SEPARATOR,
                                *ANSWER_PIECES])
        if jax.process_index() == 0:
            storage.save_tokenizer(path, tok.backend)
    else:
        tok = load_bpe(path)
    ids = {name: tok.token_to_id(name) for name in (VISION_START, IMAGE_PAD, VISION_END)}
    if None in ids.values():
        raise ValueError(f"tokenizer {path} lacks the vision tokens: {ids}")
    text = m.random_model_config(vocab_size=tok.vocab_size, eos_token_ids=tok.eos_token_ids,
                                 tie_word_embeddings=True, max_position_embeddings=4096)
    vision = VisionConfig(out_hidden_size=m.hidden_size, initializer_range=m.initializer_range,
                          **TINY_VISION)
    cfg = VLConfig(text=text, vision=vision, image_token_id=ids[IMAGE_PAD],
                   vision_start_token_id=ids[VISION_START], vision_end_token_id=ids[VISION_END],
                   mrope_section=_mrope_section(m.head_dim))
    return init_qwen3_vl(cfg, config.trainer.seed + m.seed, mesh=mesh), Codec(tok)


class VLPrompts:
    """(episode, t) -> prompt ids with the picture's tokens expanded (cached), and the
    picture preprocessed (patches, grid); every picture of a run has one size."""

    def __init__(self, config, codec: Codec, view: HostEpisodes, vl: VLConfig):
        self.text = PromptCache(config, codec, view)
        self.view, self.vl = view, vl
        self.cell = config.mindzero.data.image_cell_size
        self.style = config.mindzero.data.image_style
        self.cache: dict[tuple[int, int], list[int]] = {}
        self._pictures: dict[tuple[int, int], tuple] = {}  # the latest few, insertion order
        e, t = data_lib.timestep_records(view, 1)[0]
        self.grid = tuple(self.image(e, t)[1])
        self.tokens = num_image_tokens(self.grid, vl.vision)
        self.num_patches = int(np.prod(self.grid))

    def __call__(self, e: int, t: int) -> list[int]:
        if (e, t) not in self.cache:
            self.cache[(e, t)] = expand_image_tokens(self.text(e, t), [self.grid], self.vl)
        return self.cache[(e, t)]

    def image(self, e: int, t: int) -> tuple[np.ndarray, tuple]:
        key = (int(e), int(t))
        if key not in self._pictures:  # a rollout's sampler and its batch share a picture
            if len(self._pictures) >= 1024:
                self._pictures.pop(next(iter(self._pictures)))
            self._pictures[key] = preprocess_image(
                observation_image(self.view, e, t, self.cell, self.style), self.vl.vision)
        return self._pictures[key]


def generate_vl_rows(model: Qwen3VL, prompts, image_keys, row_ids, *, render, key,
                     num_patches: int, rows_per_call: int = 0, **kwargs) -> list[list[int]]:
    """`rl.distributed.generate_rows` for image+text prompts: row i shows the picture
    `render(*image_keys[i])` (preprocessed (patches, grid)). On several processes the rows'
    keys and prompts are gathered and every process renders what a call samples, so no
    pictures cross hosts. Each row samples from `fold_in(key, row)`, so the tokens do not
    depend on how rows are split into calls or processes."""
    # the text rollouts' prompt floor (`rl.trainer.compact_kwargs`): an image+text call
    # sizes its own prefill by its pictures and prompts (`vl_sampling.prefill_cache`)
    kwargs.pop("min_prompt_len", None)
    everyone = distributed.gather_objects((list(map(list, prompts)), list(image_keys),
                                           np.asarray(row_ids).tolist()))
    me = jax.process_index()
    out: list[list[int]] = []
    for parts in distributed.call_slices([len(p) for p, _, _ in everyone], rows_per_call):
        rows = [r for (p, _, _), part in zip(everyone, parts) for r in p[part]]
        keys = [k for (_, ks, _), part in zip(everyone, parts) for k in ks[part]]
        rids = [i for (_, _, ids), part in zip(everyone, parts) for i in ids[part]]
        lo = sum(part.stop - part.start for part in parts[:me])
        seqs = vl_sampling.generate(model, rows, [[render(*k)] for k in keys],
                                    preprocessed=True, num_patches=num_patches, key=key,
                                    row_ids=np.asarray(rids), **kwargs).sequences()
        out += seqs[lo:lo + parts[me].stop - parts[me].start]
    return out


def image_keys(tasks: Sequence[dict], repeat: int = 1) -> list[tuple[int, int]]:
    """Each row's picture as its (episode, t), `repeat` rows per task."""
    return [(int(t["episode"]), int(t["t"])) for t in tasks for _ in range(repeat)]


def global_vl_batch(rollout, keys: Sequence[tuple[int, int]], prompts: "VLPrompts",
                    cfg: VLConfig, *, row_len: int, pad_id: int):
    """The rollout's image+text rows of every process, built alike on each (a host
    all-gather of token ids and picture keys; each process renders the pictures itself),
    so the update's rows and PPO mini-batches are those of a single process."""
    r = global_rollout(rollout)
    everyone = [k for part in distributed.gather_objects(list(keys)) for k in part]
    r.batch = vl_rows(cfg, r.sequences, r.policy_masks, r.advantages, r.group_ids,
                      [[prompts.image(*k)] for k in everyone], row_len=row_len,
                      num_patches=prompts.num_patches, pad_id=pad_id,
                      decision_masks=r.decision_masks)
    r.batch_is_global = True
    return r


class VLWarmupRollout(WarmupRollout):
    """The format warm-up on image prompts (teacher targets as in the text warm-up)."""

    def __init__(self, config, codec: Codec, view: HostEpisodes, prompts: VLPrompts,
                 row_len: int):
        super().__init__(config, codec, view)
        self.prompts, self.row_len = prompts, row_len

    def __call__(self, model, tasks, key, step):
        r = super().__call__(model, tasks, key, step)
        return global_vl_batch(r, image_keys(tasks), self.prompts, model.config,
                               row_len=self.row_len, pad_id=self.codec.pad_id)


class VLParticleRollout(goals_text.ParticleRollout):
    """SSRL on image prompts: `group_size` particle completions per picture, eq. 4."""

    def __init__(self, config, codec: Codec, view: HostEpisodes, table, prompts: VLPrompts):
        super().__init__(config, codec, view, table)
        self.prompts = prompts
        self._keys = None

    def generate(self, model, prompts, tasks, key):
        c = self.config.trainer
        keys = image_keys(tasks, c.group_size)
        self._keys = keys
        return generate_vl_rows(model, prompts, keys, sample_rows(tasks, c.group_size),
                                render=self.prompts.image, key=key,
                                num_patches=self.prompts.num_patches,
                                max_new_tokens=c.max_new_tokens, temperature=c.temperature,
                                top_p=c.top_p, stop=list(self.codec.eos_ids),
                                pad_id=self.codec.pad_id, rows_per_call=c.rollout_rows,
                                **self.explore())

    def __call__(self, model, tasks, key, step):
        r = super().__call__(model, tasks, key, step)
        keys, self._keys = self._keys, None
        return global_vl_batch(r, keys, self.prompts, model.config,
                               row_len=self.config.trainer.row_len, pad_id=self.codec.pad_id)


def vl_row_len(config, prompts: VLPrompts, view: HostEpisodes, completion: int,
               quantum: int = 16) -> int:
    """One row length for a phase: the longest expanded prompt + the completion budget."""
    longest = max(len(prompts(e, t)) for e, t in data_lib.timestep_records(
        view, config.mindzero.data.stride))
    return int(np.ceil((longest + completion + 1) / quantum) * quantum)


def vl_heldout_monitor(config, view: HostEpisodes, codec: Codec, vl: VLConfig,
                       num_rows: int = 32):
    """The held-out monitor of `trainer.heldout_monitor` on image prompts: top-1 goal
    accuracy, log score of the true goal, distinct completions."""
    d, e_cfg = config.mindzero.data, config.mindzero.eval
    prompts = VLPrompts(config, codec, view, vl)
    rows, true = monitor_rows(config, view, num_rows)
    n = d.num_particles
    ids = [prompts(e, t) for e, t in rows]

    def score(step, model) -> dict:
        seqs = generate_vl_rows(model, ids, rows, np.arange(len(ids)), render=prompts.image,
                                key=jax.random.key(config.trainer.seed),
                                num_patches=prompts.num_patches,
                                max_new_tokens=config.trainer.max_new_tokens,
                                temperature=e_cfg.temperature, stop=list(codec.eos_ids),
                                pad_id=codec.pad_id, rows_per_call=config.trainer.rollout_rows)
        texts = [codec.decode(s) for s in seqs]
        return monitor_scores(texts, rows, true, view, n, e_cfg.score_mix)
    return score


def prepare(config, run_dir: Path, mesh):
    """The goal task over image observations for the one driver (`driver.train`): the text
    goal task's episodes, teacher and reward on a Qwen3-VL policy whose prompts carry
    their pictures; its warm-up is checked and retried as the text one is."""
    train_eps, test_eps = goals_text.make_episodes(config)
    view, test_view = HostEpisodes.from_episodes(train_eps), HostEpisodes.from_episodes(test_eps)
    model, codec = build_vl_model(config, run_dir, views=(view, test_view), mesh=mesh)
    vl = model.config
    prompts = VLPrompts(config, codec, view, vl)

    def ssrl_rollout(config, model):
        table = np.asarray(cumulative_log_likelihoods(
            train_eps.trajectories, goals_text.env_params(config)))
        return VLParticleRollout(config, codec, view, table, prompts)

    return Prepared(
        model=model, codec=codec,
        row_len=lambda completion: vl_row_len(config, prompts, view, completion),
        monitor=lambda config: vl_heldout_monitor(config, test_view, codec, vl),
        warmup_tasks=task_records(view, 1),
        warmup_rollout=lambda config, wcfg: VLWarmupRollout(config, codec, view, prompts,
                                                            wcfg.row_len),
        ssrl_tasks=task_records(view, config.mindzero.data.stride),
        ssrl_rollout=ssrl_rollout,
        teacher_budget=longest_teacher_target(config, codec, view) if
        config.mindzero.warmup.steps else 0,
        rebuild=lambda cfg: build_vl_model(cfg, run_dir, mesh=mesh)[0],
        result={"train": train_eps, "test": test_eps})
