"""`jaxtom generate MODEL --image PATH --prompt TEXT` on a tiny random Qwen3-VL directory."""

import argparse
import json

import jax
import numpy as np
import pytest
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers, trainers

from jaxtom.commands import generate as cli
from jaxtom.models import from_pretrained, image_processing
from jaxtom.models.qwen3_vl import Qwen3VL, prepare_batch
from jaxtom.models.tiny_vl import save_tiny_vl_hf

# ids the BPE below gives its added tokens, in this order, after its 256 byte tokens
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
TOKENS = dict(vision_start_token_id=258, vision_end_token_id=259, image_token_id=260,
              video_token_id=261)


def _parser():
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    from jaxtom.gridworld import env
    from jaxtom.gridworld.render import render_rgb
    from jaxtom.gridworld.types import EnvParams

    path = tmp_path_factory.mktemp("vl_cli")
    torch_model = save_tiny_vl_hf(path, text=dict(vocab_size=264), **TOKENS)
    bpe = Tokenizer(tm.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["a b c"], trainers.BpeTrainer(
        vocab_size=256, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.add_special_tokens(SPECIALS)
    assert [bpe.token_to_id(s) for s in SPECIALS] == list(range(256, 262))
    bpe.save(str(path / "tokenizer.json"))
    _, state = env.reset(jax.random.key(3), EnvParams())
    Image.fromarray(np.asarray(render_rgb(state, cell_size=8))).save(path / "grid.png")
    return path, torch_model


def test_generate_with_image_matches_transformers(vl_dir, capsys):
    path, torch_model = vl_dir
    args = _parser().parse_args(["generate", str(path), "--image", str(path / "grid.png"),
                                 "--prompt", "a b", "--chat", "--json",
                                 "--max-new-tokens", "16", "--temperature", "0"])
    assert args.func(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    # the reference: the same chat text through transformers' greedy generate
    model = from_pretrained(path)
    assert isinstance(model, Qwen3VL)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    text = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>a b<|im_end|>\n"
            "<|im_start|>assistant\n")
    image = np.asarray(Image.open(path / "grid.png").convert("RGB"))
    pre = [image_processing.preprocess_image(image, model.config.vision)]
    batch = prepare_batch(model.config, [tok.encode(text).ids], [pre], preprocessed=True)
    ids = torch.tensor(batch.input_ids, dtype=torch.long)
    with torch.no_grad():
        out = torch_model.generate(
            input_ids=ids, pixel_values=torch.tensor(pre[0][0]),
            image_grid_thw=torch.tensor([pre[0][1]]), mm_token_type_ids=(ids == 260).int(),
            max_new_tokens=16, do_sample=False, eos_token_id=257)
    ref = out[0, ids.shape[1]:].tolist()
    assert report["tokens"] == ref
    assert report["finished"] == (ref[-1] == 257)
    assert len(report["logprobs"]) == len(ref) and report["tflops"] > 0
    assert report["text"] == tok.decode(ref, skip_special_tokens=False)


def test_image_count_errors(vl_dir, tiny_checkpoints):
    path, _ = vl_dir
    args = _parser().parse_args(["generate", str(path), "--image", str(path / "grid.png"),
                                 "--prompt", "<|image_pad|> a <|image_pad|>", "--json"])
    with pytest.raises(SystemExit, match="2 <\\|image_pad\\|> placeholders but 1 images"):
        args.func(args)
    text_dir = tiny_checkpoints["qwen3-gqa"][0]
    args = _parser().parse_args(["generate", str(text_dir), "--image", str(path / "grid.png"),
                                 "--ids", "1,2"])
    with pytest.raises(SystemExit, match="--image needs a Qwen3-VL model"):
        args.func(args)
