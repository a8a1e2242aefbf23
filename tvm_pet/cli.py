"""The ``tvm-pet`` command line.

``tvm-pet verify A.onnx B.onnx [--json] [--tests T] [--seed S]``
    PET's verifier as a "diff" of two tensor programs: per output, whether the two models compute
    the same thing, and the boxes where they differ. Exit code 0 either way, 2 on bad input.

``tvm-pet example NAME DIR``
    Writes a paper example as two ONNX models, ``DIR/original.onnx`` and ``DIR/candidate.onnx``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from tvm_pet.errors import PetError

EXAMPLES = ("figure1", "figure3", "figure3-partial", "weight-changed", "off-by-one-slice",
            "wrong-padding", "equivalent")


def _cmd_verify(args: argparse.Namespace) -> int:
    from tvm_pet.onnx import import_model
    from tvm_pet.verify.verifier import verify
    original = import_model(args.original, require_multilinear=True)
    candidate = import_model(args.candidate, require_multilinear=True)
    start = time.perf_counter()
    result = verify(original, candidate, tests=args.tests, seed=args.seed)
    elapsed = time.perf_counter() - start
    if args.json:
        out = result.to_json()
        out["seconds"] = round(elapsed, 4)
        print(json.dumps(out, indent=2))
        return 0
    verdict = "equivalent" if result.equivalent else "NOT equivalent"
    print(f"{args.original} vs {args.candidate}: {verdict} "
          f"({result.positions} positions x {result.tests} tests mod p={result.prime}, "
          f"miss probability <= {result.error_bound:.1e}, {elapsed:.2f} s)")
    for o in result.outputs:
        state = "same" if o.equivalent else f"differs in {len(o.boxes)} box(es)"
        print(f"  {o.name} {list(o.shape)}: {state} ({o.tested_boxes} boxes tested)")
        for box in o.boxes[:args.max_boxes]:
            rng = ", ".join(f"{l}:{h}" + (f":{s}" if s > 1 else "")
                            for l, h, s in zip(box.lo, box.hi, box.step))
            print(f"    [{rng}]")
        if len(o.boxes) > args.max_boxes:
            print(f"    ... {len(o.boxes) - args.max_boxes} more (use --json for all)")
    return 0


def _cmd_example(args: argparse.Namespace) -> int:
    import pathlib

    from tvm_pet import cases
    from tvm_pet.onnx import save_model
    makers = {
        "figure1": cases.figure1_pair, "figure3": lambda: cases.figure3_pair(exact=True),
        "figure3-partial": lambda: cases.figure3_pair(exact=False),
        "weight-changed": cases.weight_changed_pair, "off-by-one-slice": cases.off_by_one_slice_pair,
        "wrong-padding": cases.wrong_padding_pair, "equivalent": cases.equivalent_pair,
    }
    original, candidate = makers[args.name]()
    out = pathlib.Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    save_model(original, out / "original.onnx")
    save_model(candidate, out / "candidate.onnx")
    print(f"wrote {out / 'original.onnx'} and {out / 'candidate.onnx'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tvm-pet", description="PET for Apache TVM")
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="where do two multi-linear ONNX models differ?")
    v.add_argument("original")
    v.add_argument("candidate")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument("--tests", type=int, default=4, help="random tests per position (default 4)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--max-boxes", type=int, default=20, help="boxes listed per output")
    v.set_defaults(func=_cmd_verify)
    e = sub.add_parser("example", help="write a paper example pair as ONNX models")
    e.add_argument("name", choices=EXAMPLES)
    e.add_argument("dir")
    e.set_defaults(func=_cmd_example)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tvm-pet`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PetError as e:
        print(f"tvm-pet {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tvm-pet {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
