"""Every command given a missing model path, a truncated checkpoint or a workdir it cannot
write prints one line naming the path and exits with status 2, without a traceback;
`jaxtom --debug` prints the traceback too. In-process through `jaxtom.cli.main`, each
invocation failing before any model is built (tiny configs, no training)."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxtom import cli
from tests.models.test_export_sharded import random_hf_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "configs" / "toy_cpu.py")
CTOM = str(ROOT / "configs" / "ctom_math_smollm2.py")
MINDZERO = str(ROOT / "configs" / "mindzero_gridworld_tiny.py")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """missing: a path that does not exist; truncated: an HF directory (with a tokenizer)
    whose model.safetensors lost its second half; blocked: a directory path below a
    regular file, which nobody can create; run: a run directory (config.json only)."""
    from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers, trainers

    from jaxtom.commands.train import record_config
    from jaxtom.config import load_config

    root = tmp_path_factory.mktemp("inputs")
    truncated = random_hf_checkpoint(root / "truncated")
    bpe = Tokenizer(tm.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["a b c"], trainers.BpeTrainer(
        vocab_size=64, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.save(str(truncated / "tokenizer.json"))
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    (root / "file").write_text("a regular file")
    run = root / "run"
    record_config(load_config(TOY, [f"trainer.workdir={run}"]))
    truncated_run = root / "truncated_run"
    config = load_config(TOY, [f"trainer.workdir={truncated_run}"])
    record_config(dataclasses.replace(config, model=dataclasses.replace(
        config.model, path=str(truncated))))
    return {"missing": str(root / "no_such_model"), "truncated": str(truncated),
            "weights": str(weights), "blocked": str(root / "file" / "run"), "run": str(run),
            "truncated_run": str(truncated_run), "out": str(root / "out"),
            "workdir": str(root / "workdir")}


# (command line, the path its error line names), each formatted with `paths`
CASES = {
    "train-missing-model": ("train {toy} model.path={missing} trainer.workdir={workdir}",
                            "{missing}"),
    "train-truncated": ("train {toy} model.path={truncated} trainer.workdir={workdir}",
                        "{weights}"),
    "train-workdir": ("train {toy} trainer.workdir={blocked}", "{blocked}"),
    "eval-missing-model": ("eval {ctom} model.path={missing} trainer.workdir={workdir}",
                           "{missing}"),
    "eval-truncated": ("eval {ctom} model.path={truncated} trainer.workdir={workdir}",
                       "{weights}"),
    "eval-workdir": ("eval {ctom} trainer.workdir={blocked}", "{blocked}"),
    "mindzero-missing-model": ("mindzero train {mindzero} model.path={missing} "
                               "trainer.workdir={workdir}", "{missing}"),
    "mindzero-truncated": ("mindzero train {mindzero} model.path={truncated} "
                           "trainer.workdir={workdir}", "{weights}"),
    "mindzero-workdir": ("mindzero train {mindzero} trainer.workdir={blocked}", "{blocked}"),
    "generate-missing-model": ("generate {missing} --ids 1,2", "{missing}"),
    "generate-truncated": ("generate {truncated} --ids 1,2", "{weights}"),
    "plan-missing-model": ("plan {toy} model.path={missing}", "{missing}"),
    "export-missing-run": ("export {missing} {out}", "{missing}"),
    "export-truncated": ("export {truncated_run} {out}", "{weights}"),
    "export-out": ("export {run} {blocked}", "{blocked}"),
}


def _args(template: str, paths: dict) -> list[str]:
    return template.format(toy=TOY, ctom=CTOM, mindzero=MINDZERO, **paths).split()


@pytest.mark.parametrize("case", list(CASES))
def test_input_error_is_one_line_and_exit_2(case, paths, capsys):
    line, names = CASES[case]
    assert cli.main(_args(line, paths)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(("error: ", "config error: ")), err
    assert names.format(**paths) in lines[0]
    assert "Traceback" not in err


def test_truncated_config_json_is_one_plan_line(paths, tmp_path, capsys):
    """`jaxtom plan` reads a checkpoint's config.json alone: a truncated one is its error."""
    (tmp_path / "config.json").write_text('{"architectures": ["Qwen3ForCa')
    assert cli.main(["plan", TOY, f"model.path={tmp_path}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "config.json") in lines[0], lines


def test_debug_prints_the_traceback(paths, capsys):
    assert cli.main(["--debug", *_args(CASES["generate-truncated"][0], paths)]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_read_header" in err
    assert err.strip().splitlines()[-1].startswith(f"error: {paths['weights']}:")


def test_a_bug_keeps_its_traceback(monkeypatch, paths):
    """Only input errors become one line: anything else propagates."""
    from jaxtom.commands import generate

    def broken(args):
        raise KeyError("a bug")
    monkeypatch.setattr(generate, "run", broken)
    with pytest.raises(KeyError):
        cli.main(_args(CASES["generate-missing-model"][0], paths))


def test_the_jaxtom_process_exits_2_with_one_line(paths):
    done = subprocess.run([sys.executable, "-m", "jaxtom.cli", "generate", paths["truncated"],
                           "--ids", "1,2"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert paths["weights"] in done.stderr and "Traceback" not in done.stderr
