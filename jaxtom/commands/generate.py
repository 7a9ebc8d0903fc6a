"""`jaxtom generate`: sample from an HF directory or GGUF file from the command line."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text with a local model",
                              description="Generate from a Hugging Face directory or .gguf file.")
    p.add_argument("model", help="HF model directory or .gguf file")
    p.add_argument("--prompt", help="prompt text")
    p.add_argument("--ids", help="comma-separated prompt token ids (instead of --prompt)")
    p.add_argument("--image", action="append", default=[],
                   help="image file for a Qwen3-VL model (repeatable; fills the prompt's "
                        "<|image_pad|> placeholders in order, else goes before the text)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as one user chat turn")
    p.add_argument("--no-think", action="store_true", help="Qwen3: disable thinking")
    p.add_argument("--tokenizer", help="tokenizer.json/.model path, or 'qwen3' / 'llama3'")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--mesh", default=None, help="data,fsdp,tensor sizes, e.g. 1,2,4")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def load_tokenizer(model_path: Path, spec: str | None):
    from jaxtom import tokenizer as tok

    if spec == "qwen3":
        return tok.qwen3_tokenizer()
    if spec == "llama3":
        return tok.llama3_tokenizer()
    if spec:
        return tok.Tokenizer.from_file(spec)
    if model_path.suffix == ".gguf":
        return tok.Tokenizer.from_gguf(model_path)
    if (model_path / "tokenizer.json").exists():
        return tok.Tokenizer.from_file(model_path)
    return None


def run(args: argparse.Namespace) -> int:
    import jax

    from jaxtom import flops, models, parallel

    from jaxtom.sampling import sampler

    path = Path(args.model)
    if (args.prompt is None) == (args.ids is None):
        raise SystemExit("give exactly one of --prompt or --ids")
    mesh = parallel.make_mesh(*map(int, args.mesh.split(","))) if args.mesh else None
    model = models.from_pretrained(path, dtype=args.dtype, mesh=mesh)
    tokenizer = load_tokenizer(path, args.tokenizer)
    if isinstance(model, models.Qwen3VL):
        from jaxtom.commands.generate_vl import run_vl
        return run_vl(args, model, tokenizer)
    if args.image:
        raise SystemExit(f"--image needs a Qwen3-VL model; {path} is a text-only "
                         f"{model.config.architecture}")
    if args.ids is not None:
        prompt = [int(t) for t in args.ids.split(",")]
    else:
        if tokenizer is None:
            raise SystemExit(f"no tokenizer found next to {path}; pass --tokenizer or --ids")
        text = args.prompt
        if args.chat:
            options = {"enable_thinking": False} if args.no_think else {}
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}], **options)
        prompt = tokenizer.encode(text)
    stop = list(args.stop) + (list(tokenizer.eos_token_ids) if tokenizer else [])
    start = time.perf_counter()
    result = sampler.generate(model, [prompt], max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                               stop=stop, key=jax.random.key(args.seed), tokenizer=tokenizer)
    seconds = time.perf_counter() - start
    tokens = result.sequences()[0]
    text = result.texts[0] if result.texts else None
    n_tok = len(prompt) + len(tokens)
    report = {"tokens": tokens, "text": text, "finished": bool(result.finished[0]),
              "logprobs": [round(float(x), 5) for x in result.logprobs[0][:len(tokens)]],
              "seconds": round(seconds, 3),
              "tflops": flops.inference_tflops(flops.active_params(model), n_tok)}
    if args.json:
        print(json.dumps(report))
    else:
        print(text if text is not None else " ".join(map(str, tokens)))
    return 0
