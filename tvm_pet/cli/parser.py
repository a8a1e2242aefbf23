"""``tvm-pet``'s argument parser: its subcommands, and the option groups of ``optimize`` and
``tune``: ``--help`` lists the options a user sets, ``--help-all`` the advanced ones too.
"""
from __future__ import annotations

import argparse

from tvm_pet.cli import commands
from tvm_pet.cli.options import (BASE_TIME_LIMIT, BUDGET_TIME_LIMIT_PER_MINUTE,
                                 DEFAULT_UNTUNED_MINUTES, DEFAULT_UNTUNED_TRIALS)
from tvm_pet.pipeline.options import LAYOUT_CHOICES
from tvm_pet.search.config import SEARCHES

EXAMPLES = ("figure1", "figure3", "figure3-partial", "weight-changed", "off-by-one-slice",
            "wrong-padding", "equivalent")

#: Options of ``optimize`` and ``tune`` that no longer have an effect, accepted so that earlier
#: command lines still run: each one given prints a line on stderr saying what the run does
#: without it (:func:`retired_lines`).
RETIRED = {"--columns": "the search runs without it",
           "--second-screen": "the screen alone ranks the mutants",
           "--screen-trials": "no mutant is short-tuned to rank it"}


def build_parser() -> argparse.ArgumentParser:
    """The ``tvm-pet`` parser. Each subcommand's ``func`` is its ``_cmd_*`` of
    :mod:`tvm_pet.cli.commands`, looked up as the parser is built."""
    parser = argparse.ArgumentParser(prog="tvm-pet", description="PET for Apache TVM")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_verify(sub)
    _add_explore(sub)
    _add_optimize_and_tune(sub)
    _add_model_and_example(sub)
    return parser


def _add_verify(sub) -> None:
    v = sub.add_parser("verify", help="where do two multi-linear ONNX models differ?")
    v.add_argument("original")
    v.add_argument("candidate")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument("--tests", type=int, default=4, help="random tests per position (default 4)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--max-boxes", type=int, default=20, help="boxes listed per output")
    v.set_defaults(func=commands._cmd_verify)


def _add_explore(sub) -> None:
    x = sub.add_parser("explore", help="list verified mutants of every multi-linear subprogram")
    x.add_argument("model")
    x.add_argument("--depth", type=int, default=3, help="most operators per mutant (default 3)")
    x.add_argument("--rounds", type=int, default=1, help="rounds of mutating mutants (default 1)")
    x.add_argument("--time-limit", type=float, default=300.0, help="seconds (default 300)")
    x.add_argument("--emit", metavar="DIR", help="write subprograms and mutants as ONNX")
    x.add_argument("--search", choices=SEARCHES,
                   help="also run this search on the model with the analytic cost and print "
                        "what it chooses: algorithm2 (PET's top-K rounds) or eqsat (one "
                        "e-graph of every verified mutant, extracted by cost)")
    x.add_argument("--json", action="store_true", help="print the result as JSON")
    x.add_argument("--max-list", type=int, default=10,
                   help="mutants listed per subprogram with --verbose (default 10)")
    x.add_argument("--no-tvm-rewrites", action="store_true",
                   help="explore the model as TVM imports it, without TVM's graph rewrites")
    _input_shape_flag(x)
    _progress_flags(x)
    x.add_argument("--verbose", action="store_true",
                   help="list every subprogram and its mutants (default: a short summary)")
    x.set_defaults(func=commands._cmd_explore)


#: What ``optimize`` and ``tune`` do, in ``--help``.
_DESCRIPTIONS = {
    "optimize": "Optimize a model with PET for a TVM target: search for rewrites the verifier "
                "proves equal to the original, time the best end to end against TVM's own "
                "build of the original (the same tuning records, the same TVM rewrites), and "
                "keep PET's program only where it is faster beyond the noise.",
    "tune": "Tune the kernels of a model and those of PET's most promising rewrites into the "
            "tuning records, for a later optimize.",
}


def _add_optimize_and_tune(sub) -> None:
    """``optimize`` and ``tune``: what ``--help`` shows (what to build, the budget, the output)
    and the advanced options ``--help-all`` adds."""
    for name, helptext in (("optimize", "optimize an ONNX or torch.export (.pt2) model with PET "
                                        "for a TVM target"),
                           ("tune", "tune a model's kernels and its promising mutants")):
        o = sub.add_parser(name, help=helptext, description=_DESCRIPTIONS[name],
                           usage="%(prog)s MODEL" + (" --out DIR" if name == "optimize" else "")
                                 + " [options]")
        o.add_argument("--help-all", action=_HelpAll)
        _build_flags(o.add_argument_group("what to build"))
        _budget_flags(o.add_argument_group("budget"), name)
        output = o.add_argument_group("output")
        if name == "optimize":
            output.add_argument("--out", required=True, metavar="DIR",
                                help="the folder to write report.json, both builds and the "
                                     "optimized model into")
        _progress_flags(output)
        output.add_argument("--verbose", action="store_true",
                            help="print the full account: every timing, the tuning, the "
                                 "records and the search (default: a short summary)"
                            if name == "optimize" else
                            "print the full summary as JSON (default: a few lines)")
        _search_flags(o.add_argument_group("search (advanced)"), name)
        _tuning_flags(o.add_argument_group("tuning (advanced)"))
        if name == "optimize":
            _timing_flags(o.add_argument_group("end-to-end timing and decision (advanced)"))
            o.set_defaults(func=commands._cmd_optimize)
        else:
            o.set_defaults(func=commands._cmd_tune)


def _build_flags(g) -> None:
    """What to build: the model, the target, its input shapes, and how both sides are
    lowered."""
    g.add_argument("model", help="an ONNX file, or a .pt2 file saved with torch.export.save")
    g.add_argument("--target", default="llvm",
                   help="the TVM target: llvm (this CPU, the default), e.g. "
                        "'llvm -mcpu=haswell', or cuda")
    _input_shape_flag(g)
    g.add_argument("--layout", choices=LAYOUT_CHOICES, default="auto",
                   help="the convolutions' layout on both sides: NCHW as imported, NHWC by "
                        "TVM's ConvertLayout; auto (the default) times the tuned original in "
                        "both and builds the faster")
    g.add_argument("--fast-math", action="store_true",
                   help="lower both sides with TVM's FastMathTransform: erf, exp, tanh and "
                        "softmax by vectorized polynomial approximations")
    _advanced(g, "--tvm-default", action="store_true",
              help="build both sides as TVM's default pipeline does, the weights in the "
                   "model's layouts (default on a CPU: TVM's best build, the weights prepacked "
                   "into the layouts the tuned kernels read)")
    g.add_argument("--winograd", action="store_true",
                   help="also offer each 3x3 stride-1 convolution by Winograd's F(4x4, 3x3) "
                        "(a quarter of the multiplications, another rounding), kept where its "
                        "tuned kernels measure faster")


def _budget_flags(g, name: str) -> None:
    """The budget: tuning trials or a whole-model budget, the time limit, the records and the
    tuning seed."""
    g.add_argument("--trials", type=int, default=None if name == "optimize" else 64,
                   metavar="N",
                   help="MetaSchedule trials per kernel; 0: the tuning records only (default: "
                        f"{DEFAULT_UNTUNED_TRIALS} for each kernel with no record anywhere, or "
                        f"the whole model within {DEFAULT_UNTUNED_MINUTES} minutes where more "
                        "than 8 have none)" if name == "optimize" else
                        "MetaSchedule trials per kernel (default 64)")
    g.add_argument("--budget", metavar="N|Nm",
                   help="tune the whole model within N trials in all, or N minutes (20m), "
                        "shared across its kernels by MetaSchedule's task scheduler "
                        "(instead of --trials)")
    g.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds for the whole run, tuning not counted (default "
                        f"{BASE_TIME_LIMIT[name]:g}; with --budget Nm, "
                        f"{BUDGET_TIME_LIMIT_PER_MINUTE:g} per minute of it where that is more)")
    g.add_argument("--records", metavar="DIR",
                   help="the tuning records folder to read and add to (default: the target's "
                        "records in the working directory, else those shipped with tvm_pet)")
    g.add_argument("--seed", type=int, default=0, metavar="N",
                   help="the tuning seed (default 0); only kernels tuned now draw with it")


def _search_flags(g, name: str) -> None:
    """The search's budgets, the forms it offers besides PET's own rewrites, and (``optimize``)
    its cost model."""
    _advanced(g, "--depth", type=int, metavar="N", default=3,
              help="most operators per mutant (default 3)")
    _advanced(g, "--rounds", type=int, metavar="N", default=1,
              help="rounds of mutation: the next round mutates the best mutants found "
                   "(default 1)")
    _advanced(g, "--topk", type=int, metavar="N", default=4,
              help="programs kept in the search's heap (default 4)")
    _advanced(g, "--im2col", action="store_true",
              help="also offer each 2-D or 3-D convolution larger than 1x1 as one matrix "
                   "product over its shifted windows (the same products, summed in another "
                   "order), tuned in the places kept for mutants the untuned screen cannot "
                   "rank and kept where its tuned kernels measure faster")
    _advanced(g, "--columns", action="store_true",
              help="no longer has an effect (matrix products in pieces of their columns are "
                   "not offered any more); accepted so that earlier command lines still run")
    _advanced(g, "--no-tvm-rewrites", action="store_true",
              help="compare with TVM's default import: skip TVM's own graph rewrites (BN "
                   "folding, CSE, CombineParallelMatmul), run on both sides by default")
    if name == "optimize":
        _advanced(g, "--search", choices=SEARCHES, default="algorithm2",
                  help="how candidates are searched: algorithm2 (PET's top-K rounds of "
                       "mutation, the default) or eqsat (every verified mutant and the "
                       "post-optimizations in one e-graph, extracted by cost)")
        _advanced(g, "--cost", choices=("measured", "analytic"), default="measured",
                  help="how the search costs a candidate: measured (TVM's kernels, timed; the "
                       "default) or analytic (counted FLOPs and bytes, nothing run)")


def _tuning_flags(g) -> None:
    """Which of PET's mutants are tuned, and how their trials are charged."""
    _advanced(g, "--promising", type=int, default=4, metavar="N",
              help="mutants of the whole model tuned besides the original (default 4; up to "
                   "half of them pad an awkward side to a smooth one, the rest have the best "
                   "expected saving; --winograd tunes up to N more, convolutions by "
                   "Winograd's algorithm, and --im2col up to N more, convolutions as a product "
                   "over their windows)")
    _advanced(g, "--second-screen", type=int, metavar="N",
              help="no longer has an effect (mutants are not short-tuned to rank them any "
                   "more); accepted so that earlier command lines still run")
    _advanced(g, "--screen-trials", type=int, metavar="T",
              help="no longer has an effect (it set the trials of --second-screen); accepted "
                   "so that earlier command lines still run")
    _advanced(g, "--charge", choices=("beside", "inside"), default="beside",
              help="with --budget N (trials): PET's mutant trials beside the budget (default: "
                   "TVM's kernels get all N), or inside it: the original first gets 1 - "
                   "--mutant-share of N, the mutants' new kernels as many trials each while "
                   "the share holds them, the original the rest; the run then measures N "
                   "trials in all")
    _advanced(g, "--mutant-share", type=float, default=0.25, metavar="F",
              help="with --charge inside: the part of the budget kept for PET's mutants "
                   "(default 0.25; on a one-kernel model a mutant needs at least 0.5)")
    _advanced(g, "--rpc", metavar="HOST:PORT:KEY", help="measure through an RPC tracker")


def _timing_flags(g) -> None:
    """``optimize``'s end-to-end timing and decision, and its CUDA build without a GPU."""
    _advanced(g, "--confirm", type=int, default=3,
              help="candidates timed end to end, best first, before the original is kept "
                   "(default 3)")
    _advanced(g, "--first-kept", action="store_true",
              help="keep the first candidate the rule keeps (by default every one is timed, "
                   "and the fastest of those kept replaces the original)")
    _advanced(g, "--no-second-look", action="store_true",
              help="decide close calls on the first timing alone (by default they are tuned "
                   "again with a second seed, or timed over more rounds)")
    _advanced(g, "--second-look-kernels", type=int, default=8, metavar="N",
              help="the most kernels a close call's second look tunes again, at twice the "
                   "trials; with more, it times the same builds again over more rounds "
                   "(default 8)")
    _advanced(g, "--no-replication", action="store_true",
              help="replace the original on the kept candidate's one look (by default it is "
                   "timed once more, and kept only if the rule keeps it again)")
    _advanced(g, "--timing-processes", type=int, default=2, metavar="N",
              help="spread each look's rounds over N fresh processes, on a CPU (default 2): "
                   "some binaries' speed is drawn once per process by its address layout; 1 "
                   "times in this process")
    _advanced(g, "--dry-run", action="store_true",
              help="cuda without a GPU: search, build every original, mutant and correction "
                   "with nvcc, write them, stop before running a kernel")
    _advanced(g, "--arch", default="sm_90", help="CUDA arch of --dry-run (default sm_90)")


def _add_model_and_example(sub) -> None:
    m = sub.add_parser("model", help="write a seeded model of the zoo as ONNX")
    m.add_argument("name", help="e.g. dilated_conv, conv5x5, two_1x1_convs, three_matmuls, "
                                "csrnet_backend, resnet18, bert_encoder")
    m.add_argument("file")
    m.set_defaults(func=commands._cmd_model)
    e = sub.add_parser("example", help="write a paper example pair as ONNX models")
    e.add_argument("name", choices=EXAMPLES)
    e.add_argument("dir")
    e.set_defaults(func=commands._cmd_example)


def _input_shape_flag(o) -> None:
    o.add_argument("--input-shape", action="append", type=parse_input_shape, default=[],
                   metavar="NAME:D0,D1,...",
                   help="the shape of an ONNX input with dynamic dimensions (a batch axis, "
                        "a sequence length), e.g. input:1,3,224,224; once per such input; "
                        "without NAME: the model's only input")


def parse_input_shape(text: str) -> tuple:
    """``--input-shape``'s ``NAME:D0,D1,...`` as ``(NAME, (D0, D1, ...))``; NAME is None when
    left out, and may hold colons itself (``input_1:0:1,3``: the last colon separates).

    >>> parse_input_shape("x:[1, 3, 224, 224]")
    ('x', (1, 3, 224, 224))
    >>> parse_input_shape("2,4")
    (None, (2, 4))
    """
    name, _, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.strip().strip("[]").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME:D0,D1,... with whole numbers, e.g. input:1,3,224,224") from None
    if any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    return (name or None), shape


def _progress_flags(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--progress", action="store_true",
                       help="progress lines on stderr, even when it is not a terminal")
    group.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every option, those :func:`_advanced` keeps out of
    ``--help`` too, then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show every option, the advanced ones too, and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        hidden = [a for a in parser._actions if hasattr(a, "advanced_help")]
        for action in hidden:
            action.help = action.advanced_help
        try:
            parser.print_help()
        finally:
            for action in hidden:
                action.help = argparse.SUPPRESS
        parser.exit()


def retired_lines(args: argparse.Namespace) -> list[str]:
    """A line for each option of :data:`RETIRED` on the command line ``args``, saying that it
    no longer has an effect.

    >>> retired_lines(argparse.Namespace(command="tune", columns=False, second_screen=0))
    ['tvm-pet tune: --second-screen no longer has an effect; the screen alone ranks the mutants']
    """
    lines = []
    for flag, instead in RETIRED.items():
        given = getattr(args, flag[2:].replace("-", "_"), None)
        if given is not None and given is not False:
            lines.append(f"tvm-pet {args.command}: {flag} no longer has an effect; {instead}")
    return lines


def _advanced(group, *flags: str, help: str, **kwargs) -> None:
    """An option that works as any other, kept out of ``--help``; ``--help-all`` lists it with
    ``help``."""
    action = group.add_argument(*flags, help=argparse.SUPPRESS, **kwargs)
    action.advanced_help = help
