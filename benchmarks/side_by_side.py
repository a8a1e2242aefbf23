"""Whole builds of one model in forms that compute the same, timed side by side: the shared steps
of ``split_k.py``, ``ffn_pieces.py`` and ``qkv_apart.py``.

Each script builds its forms (a ``build(args, work)`` returning the exported libraries by form,
the new trials per form and the inputs; TVM's build is ``"tvm"``); :func:`measure` checks them
against TVM's outputs and times them interleaved in fresh processes
(:func:`benchmarks.equal_total.time_builds`); :func:`table` renders the rows and :func:`write`
saves ``benchmarks/results/<name>.{json,md}``. Nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
from collections.abc import Callable

from benchmarks.equal_total import process_ratio, time_builds

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def add_arguments(parser: argparse.ArgumentParser, *, processes: int, rounds: int) -> None:
    """The flags every forms script takes."""
    parser.add_argument("--records", required=True, help="a records folder (a copy of tuning_logs)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=processes)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")


def build_models(args: argparse.Namespace, work: pathlib.Path,
                 models: dict) -> tuple[dict, dict, list]:
    """A ``build`` of ONNX models, one a form: ``models`` maps a form's name to ``(model, TVM's
    rewrites on)``. Each is imported as ``optimize`` imports it, its kernels tuned at
    ``args.trials`` per task into ``args.records`` (nothing new where they have records), built
    and exported into ``work``; returns the libraries and new trials by form, and the first
    form's random inputs."""
    import onnx

    from tvm_pet.pipeline.optimize import load_model, random_inputs
    from tvm_pet.pipeline.options import DriverOptions
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    libraries, trials, inputs = {}, {}, None
    for name, (model, rewrites) in models.items():
        path = work / f"{name}.onnx"
        onnx.save(model, str(path))
        loaded = load_model(str(path), DriverOptions(target=args.target, tvm_rewrites=rewrites))
        toolchain = tvm_toolchain(args.target, args.records, None).with_lowering(loaded.lower)
        module = toolchain.lower(loaded.program)
        stats = toolchain.tune(module, args.trials, seed=args.seed,
                               progress=lambda line: print(line, file=sys.stderr, flush=True))
        trials[name] = stats.new_trials
        libraries[name] = work / f"build_{name}.so"  # not tvm.so: TVM's workers would import it
        toolchain.export(toolchain.build(module), str(libraries[name]))
        inputs = inputs or list(random_inputs(loaded.program, args.seed).values())
    return libraries, trials, inputs


def measure(args: argparse.Namespace, build: Callable) -> dict:
    """Build the forms, check and time them: per form its median, its ratio to TVM's build (the
    geometric mean of each process's ratio of medians), those ratios, its new trials and its
    largest difference from TVM's outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        libraries, trials, inputs = build(args, pathlib.Path(tmp))
        times = time_builds(libraries, inputs, processes=args.processes, rounds=args.rounds,
                            number=args.number)
    result = {"target": args.target, "trials": args.trials, "seed": args.seed,
              "processes": args.processes, "rounds": args.rounds, "number": args.number,
              "forms": {}}
    for name, row in times.items():
        ratio, by_process = process_ratio(times, "tvm", name)
        result["forms"][name] = {"median_ms": row["median_ms"], "ratio": ratio,
                                 "by_process": by_process, "new_trials": trials[name],
                                 "max_abs_err_vs_tvm": row["max_abs_err_vs_tvm"]}
    return result


def table(result: dict) -> str:
    """The forms' rows as a Markdown table."""
    lines = ["| form | ms (median) | TVM / form | by process | new trials | max abs err vs TVM |",
             "|---|---|---|---|---|---|"]
    for name, row in result["forms"].items():
        lines.append(f"| {name} | {row['median_ms']:.3f} | x{row['ratio']:.3f} | "
                     + ", ".join(f"x{r:.3f}" for r in row["by_process"])
                     + f" | {row['new_trials']} | {row['max_abs_err_vs_tvm']:.1e} |")
    return "\n".join(lines)


def timing_words(result: dict) -> str:
    """How the forms were timed, for a footnote."""
    return (f"Timed interleaved, {result['rounds']} rounds of 3 samples of {result['number']} "
            f"calls, spread over {result['processes']} fresh processes; ratios are the geometric "
            f"mean of each process's ratio of medians. TVM on 2 threads.")


def write(result: dict, text: str, name: str, no_write: bool) -> None:
    """Print ``text`` and save the result as ``benchmarks/results/<name>.{json,md}``."""
    print(text)
    if not no_write:
        (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        (RESULTS / f"{name}.md").write_text(text)


def main(argv, description: str, build: Callable, render: Callable[[dict], str], *, name: str,
         processes: int, rounds: int = 10) -> int:
    """A forms script's command line: parse the flags (``--name`` sets the results' name),
    build, measure, render and write."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser, processes=processes, rounds=rounds)
    parser.add_argument("--name", default=name,
                        help=f"results go to benchmarks/results/NAME.{{json,md}} (default {name})")
    args = parser.parse_args(argv)
    result = measure(args, build)
    write(result, render(result), args.name, args.no_write)
    return 0
