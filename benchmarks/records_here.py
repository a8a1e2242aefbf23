"""Do the shipped records serve this CPU as well as a tuning made on it? TVM's own build of a
model from several records folders, side by side.

    python benchmarks/records_here.py --records DIR --also NAME=DIR2 [--also NAME=DIR3 ...]

The shipped records are looked up by target (``llvm-skylake-avx512-c2``), and a CPU whose target
resolves the same takes them as its own, whatever CPU tuned them. Here one model (``--model``,
default BERT's encoder layer) is built by TVM alone, with its graph rewrites, from ``--records``
(a copy of ``tuning_logs/``: ``tvm``) and from each ``--also`` folder (e.g. a fresh tuning on
this CPU by ``benchmarks/run.py --seed S --records EMPTY``), with no new tuning: every kernel
must have a record in every folder. The builds are checked against ``tvm``'s outputs and timed
interleaved in ``--processes`` fresh processes. Results go to
``benchmarks/results/records_here.{json,md}``; nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import side_by_side  # noqa: E402

#: ``(name, folder)`` per ``--also``; the model built.
ALSO: list[tuple[str, str]] = []
MODEL = {"name": "bert_encoder"}


def build(args, work: pathlib.Path) -> tuple[dict, dict, list]:
    """Build and export TVM's own build from every folder: the libraries, no new trials, the
    inputs."""
    import onnx

    from tvm_pet.models import build_model
    from tvm_pet.pipeline.optimize import load_model, random_inputs
    from tvm_pet.pipeline.options import DriverOptions
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    kwargs = {"layers": 1} if MODEL["name"] == "bert_encoder" else {}
    path = work / "model.onnx"
    onnx.save(build_model(MODEL["name"], **kwargs), str(path))
    loaded = load_model(str(path), DriverOptions(target=args.target))
    libraries, trials = {}, {}
    for name, folder in [("tvm", args.records)] + ALSO:
        toolchain = tvm_toolchain(args.target, folder, None).with_lowering(loaded.lower)
        module = toolchain.lower(loaded.program)
        plan = toolchain.records_plan(module)
        if plan.own < plan.tasks - plan.unowned_spatial:
            raise SystemExit(f"{folder}: {plan.summary()}; every kernel needs a record")
        trials[name] = 0
        libraries[name] = work / f"build_{name}.so"  # not tvm.so: TVM's workers would import it
        toolchain.export(toolchain.build(module), str(libraries[name]))
    return libraries, trials, list(random_inputs(loaded.program, args.seed).values())


def render(result: dict) -> str:
    folders = ", ".join(f"`{name}`: {folder}" for name, folder in result["folders"])
    return side_by_side.table(result) + (
        f"\n\n{result['model']}, target {result['target']}: TVM's own build (its graph rewrites "
        f"on), from the records of each folder, no new tuning (`tvm`: {result['records']}; "
        f"{folders}). {side_by_side.timing_words(result)} Written by "
        f"`benchmarks/records_here.py`.\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--also", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--model", default="bert_encoder")
    known, rest = parser.parse_known_args(argv)
    ALSO.extend(tuple(item.split("=", 1)) for item in known.also)
    MODEL["name"] = known.model
    records = rest[rest.index("--records") + 1] if "--records" in rest else ""

    def rendered(result: dict) -> str:
        result.update(model=MODEL["name"], records=records, folders=ALSO)
        return render(result)
    return side_by_side.main(rest, __doc__.split("\n\n")[0], build, rendered,
                             name="records_here", processes=6)


if __name__ == "__main__":
    sys.exit(main())
