"""Compiles are bounded on a ragged GRPO run: `benchmarks/grpo_iteration.py`'s tiny model on
its compacted path (each group's prompt packed once in rows of a fixed length, finished rows
dropped from decoding), completions ending at random lengths, counted from JAX's own compile
log (`benchmarks/compiles.py`): no program compiles twice for the same shapes, and nothing
compiles after the third iteration. Without the buckets (the sampler's row, slot and prompt
ladders, the update's fixed shared rows) the same run compiles decode loops, regroups and
updates in later iterations."""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "compiles.py"
_SPEC = importlib.util.spec_from_file_location("compiles", _PATH)
compiles = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compiles)


def test_a_ragged_grpo_run_compiles_each_bucket_once_and_nothing_after_iteration_3():
    # the benchmark's model at half its depth and width: the same programs, compiled faster
    result = compiles.run_grpo(steps=6, max_len=128, stop_ids=24, settle=3,
                               num_hidden_layers=2, hidden_size=64, intermediate_size=192,
                               vocab_size=512)
    assert result["repeats"] == {}, result["per_iteration"]
    assert result["late"] == {}, result["per_iteration"]
    assert result["bounds_hold"]
    # the log was read: the run compiled its sampler and update programs, in iterations >= 1
    programs = result["per_program"]
    assert programs["decode"] >= 2, programs
    assert any(name.startswith("update_w") for name in programs), programs
    assert any(int(it) >= 1 for it in result["per_iteration"] if it.isdigit())
    # ragged: rows stopped anywhere, some past the first 32-step decode segment
    lo, hi = result["completion_len_range"]
    assert lo < 16 and hi > 32, (lo, hi)
