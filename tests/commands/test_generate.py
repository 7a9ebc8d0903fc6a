"""`jaxtom generate` end to end on a tiny checkpoint with a tokenizer.json beside it."""

import argparse
import json

from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers, trainers

from jaxtom.commands import generate as cli


def _parser():
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_generate_command(tiny_checkpoints, tmp_path, capsys):
    import shutil

    path = tmp_path / "m"
    shutil.copytree(tiny_checkpoints["qwen3-gqa"][0], path)
    bpe = Tokenizer(tm.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["a b c"], trainers.BpeTrainer(
        vocab_size=256, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.save(str(path / "tokenizer.json"))

    args = _parser().parse_args(["generate", str(path), "--prompt", "hello", "--json",
                                 "--max-new-tokens", "6", "--temperature", "0"])
    assert args.func(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(report["tokens"]) == 6 and len(report["logprobs"]) == 6
    assert report["text"] == Tokenizer.from_file(str(path / "tokenizer.json")).decode(
        report["tokens"])
    assert report["tflops"] > 0

    args = _parser().parse_args(["generate", str(path), "--ids", "1,2,3", "--max-new-tokens",
                                 "4", "--tokenizer", str(path / "tokenizer.json"), "--json"])
    args.func(args)
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])["tokens"]) == 4
