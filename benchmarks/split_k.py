"""Is BERT faster with its long-reduction product in pieces (tvm_pet.ir.splitk), end to end?

    python benchmarks/split_k.py --records DIR                 # DIR: a copy of tuning_logs/
    python benchmarks/split_k.py --records DIR2 --name split_k_draw2    # another tuning's kernels

BERT's second feed-forward product, ``[128, 3072] x [3072, 768]`` (+ bias + residual), took
2.75 ms of the layer's 8.87 ms summed over its kernels (TVM's build, 32 trials per task), where
its ``[768, 768]`` products ran 1.6 times as fast per multiply-add
(``benchmarks/results/profile-bert_encoder-split_k.md``). ``SearchConfig(split_k=True)``
offers it as four such products (``SplitKMatMul``). This script builds BERT's encoder layer
(``tvm_pet.models``, seeded weights) as TVM builds it, and with each of the mutants of its
feed-forward subprogram named in :data:`FORMS` in place (the first the generator lists of each):

- ``mul``: ``MatMul -> Mul``, GELU's ``x 0.5`` moved after the product (what the default search
  keeps on this CPU: ``benchmarks/results/llvm.md``);
- ``split_mul``: ``SplitKMatMul -> Mul``, the same with the product in four pieces.

Each form's kernels are tuned at ``--trials`` per task into ``--records`` (nothing new where the
records have them), built, checked against TVM's outputs, and the three are timed interleaved
in ``--processes`` fresh processes (a binary's speed is drawn once per process). Ratios are
each process's ratio of medians, geo-meaned. Results go to ``benchmarks/results/<name>.{json,
md}``; nothing here fails on timing, and tuning never runs in CI.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import side_by_side  # noqa: E402

#: The mutants built besides TVM's form, by their operators as summaries name them.
FORMS = {"mul": ("MatMul", "Mul"), "split_mul": ("SplitKMatMul", "Mul")}


def forms(loaded, toolchain) -> dict:
    """Per form of :data:`FORMS`, the whole program with that mutant in place (TVM's: ``tvm``)."""
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.mutant_cache import MutantCache
    from tvm_pet.search.optimizer import Optimizer, operator_subsets
    from tvm_pet.search.partition import partition, replace_subprogram

    program, config = loaded.program, SearchConfig(split_k=True)
    listing = Optimizer(config, toolchain.cost_model(), MutantCache())
    found = {"tvm": program}
    for sub in partition(program):
        for subset in operator_subsets(program, sub, config.max_subset):
            part, mutants = listing.mutants_of(program, subset, sub.name)
            for mutant, corrected in mutants:
                for name, ops in FORMS.items():
                    if mutant.ops == ops and name not in found:
                        found[name] = replace_subprogram(program, part, corrected)
    missing = set(FORMS) - set(found)
    if missing:
        raise SystemExit(f"split_k.py: the generator listed no {sorted(missing)} mutant")
    return found


def build(args, work: pathlib.Path) -> tuple[dict, dict, list]:
    """Tune, build and export every form: the libraries, the new trials per form, the inputs."""
    import onnx

    from tvm_pet.models import build_model
    from tvm_pet.pipeline.optimize import load_model, random_inputs
    from tvm_pet.pipeline.options import DriverOptions
    from tvm_pet.pipeline.toolchain import tvm_toolchain

    path = work / "bert_encoder.onnx"
    onnx.save(build_model("bert_encoder"), str(path))
    loaded = load_model(str(path), DriverOptions(target=args.target))
    toolchain = tvm_toolchain(args.target, args.records, None).with_lowering(loaded.lower)
    libraries, trials = {}, {}
    for name, program in forms(loaded, toolchain).items():
        module = toolchain.lower(program)
        stats = toolchain.tune(module, args.trials, seed=args.seed,
                               progress=lambda line: print(line, file=sys.stderr, flush=True))
        trials[name] = stats.new_trials
        libraries[name] = work / f"{name}.so"
        toolchain.export(toolchain.build(module), str(libraries[name]))
    return libraries, trials, list(random_inputs(loaded.program, args.seed).values())


def render(result: dict) -> str:
    return side_by_side.table(result) + (
        f"\n\nBERT encoder layer (batch 1, 128 tokens), target {result['target']}, "
        f"{result['trials']} trials per task for every form's kernels (seed {result['seed']}; "
        f"the records of `--records`, nothing new where they had them); `mul` is `MatMul -> "
        f"Mul`, `split_mul` `SplitKMatMul -> Mul` (`tvm_pet.ir.splitk`). "
        f"{side_by_side.timing_words(result)} Written by `benchmarks/split_k.py`.\n")


def main(argv=None) -> int:
    return side_by_side.main(argv, __doc__.split("\n\n")[0], build, render, name="split_k",
                             processes=12)


if __name__ == "__main__":
    sys.exit(main())
