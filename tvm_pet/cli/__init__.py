"""The ``tvm-pet`` command line.

``tvm-pet verify A.onnx B.onnx [--json] [--tests T] [--seed S]``
    PET's verifier as a "diff" of two tensor programs: per output, whether the two models compute
    the same thing, and the boxes where they differ. Exit code 0 either way, 2 on bad input.

``tvm-pet explore MODEL [--depth D] [--rounds R] [--emit DIR] [--search S] [--json] [--verbose]``
    Runs the mutant generator and the verifier on every multi-linear subprogram and counts the
    verified mutants (``--verbose`` lists them); ``--emit`` writes each subprogram and each
    corrected mutant as ONNX, its inputs and outputs named as the model names them;
    ``--search algorithm2|eqsat`` also runs that search with the analytic cost and prints what
    it chooses.

``tvm-pet optimize MODEL --out DIR [--target T] [--trials N | --budget N|Nm] [--verbose]``
    Optimizes the model with PET for a TVM target, times it end to end against TVM's own build
    of the original (the same tuning records and graph rewrites on both sides), keeps it only
    where it is faster, and writes ``report.json``, ``optimized.so``, ``baseline.so``,
    ``optimized.onnx`` (where tvm_pet can write it) and ``optimized.py`` into DIR. It prints a
    short summary (``--verbose``: the full account). ``--help`` lists the options a user sets,
    ``--help-all`` every option.

``tvm-pet tune MODEL [--target T] [--trials N | --budget N|Nm] [--verbose]``
    Tunes the model's kernels and those of its most promising mutants into the tuning records.

``tvm-pet model NAME FILE``
    Writes a model of the seeded zoo (:mod:`tvm_pet.models`) as an ONNX file.

``tvm-pet example NAME DIR``
    Writes a paper example as two ONNX models, ``DIR/original.onnx`` and ``DIR/candidate.onnx``.

``optimize``, ``tune`` and ``explore`` take an ONNX file (any opset TVM's ``from_onnx``
imports) or a ``.pt2`` file saved with ``torch.export.save`` (``pip install tvm-pet[torch]``),
imported by TVM's own frontend; ``verify`` reads ONNX with tvm_pet's importer. An ONNX input
with dynamic dimensions (a batch axis exported as ``"batch"``) is given its shape with
``--input-shape NAME:D0,D1,...``.

The package: :mod:`~tvm_pet.cli.parser` (the subcommands and their options),
:mod:`~tvm_pet.cli.options` (the parsed command line as the library's typed options),
:mod:`~tvm_pet.cli.commands` (what each subcommand runs and prints),
:mod:`~tvm_pet.cli.summary` (``optimize``'s short summary) and :mod:`~tvm_pet.cli.account`
(``optimize --verbose``'s full account).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

# the public names, and the helpers the tests reach through tvm_pet.cli
from tvm_pet.cli.account import _print_cpu_shared, _split_seconds, _timing_spent, _tuned_line
from tvm_pet.cli.commands import tune_lines
from tvm_pet.cli.options import (BUDGET_TIME_LIMIT_PER_MINUTE, DEFAULT_UNTUNED_MINUTES,
                                 DEFAULT_UNTUNED_TRIALS, _default_time_limit, _driver_options,
                                 _search_config)
from tvm_pet.cli.parser import EXAMPLES, build_parser, parse_input_shape, retired_lines
from tvm_pet.cli.summary import (FAST_MATH_KINDS, _fast_math_hint, _layout_words, _Signs,
                                 summary_lines)
from tvm_pet.errors import PetError

__all__ = ["main", "build_parser", "parse_input_shape", "summary_lines", "tune_lines", "EXAMPLES",
           "DEFAULT_UNTUNED_TRIALS", "DEFAULT_UNTUNED_MINUTES", "BUDGET_TIME_LIMIT_PER_MINUTE",
           "FAST_MATH_KINDS"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tvm-pet`` console script. As the script (no ``argv``), TVM's
    repeated warnings on stderr are shown once (:func:`tvm_pet.tvm_log.tvm_warnings_once`)."""
    if argv is None:
        from tvm_pet.tvm_log import tvm_warnings_once

        with tvm_warnings_once():
            return _main(None)
    return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    for line in retired_lines(args):
        print(line, file=sys.stderr)
    try:
        _default_time_limit(args)
        return args.func(args)
    except PetError as e:
        print(f"tvm-pet {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tvm-pet {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = ("; the tuning records measured so far are kept, and a second run goes on from "
                "them" if args.command in ("optimize", "tune") else "")
        print(f"tvm-pet {args.command}: interrupted{kept}", file=sys.stderr)
        return 130
