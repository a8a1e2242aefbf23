"""From ``tvm-pet``'s parsed command line to the library's typed options: the
:class:`~tvm_pet.pipeline.options.DriverOptions` of ``optimize``, ``tune`` and ``explore``, the
:class:`~tvm_pet.search.config.SearchConfig` of the search, and the defaults that depend on what
was asked (``--trials`` or ``--time-limit`` left out).
"""
from __future__ import annotations

import argparse
import sys

from tvm_pet.errors import PetError

#: ``optimize``'s trials per kernel where kernels have no record anywhere and none was asked.
DEFAULT_UNTUNED_TRIALS = 32

#: ``optimize``'s whole-model budget where more than 8 kernels have no record anywhere (minutes).
DEFAULT_UNTUNED_MINUTES = 10

#: ``--time-limit``'s default per command (tuning not counted).
BASE_TIME_LIMIT = {"optimize": 240.0, "tune": 600.0}

#: With ``--budget Nm`` and no ``--time-limit``: seconds of time limit per minute of the budget
#: (half the tuning time again), when that is more than the default. Measured on swin_t at 224
#: (124 kernels, ``--budget 30m``): with 900 s the search took 431 s and the timing 109 s for
#: its three candidates; the default 240 s had left the timing nothing and two candidates
#: untimed.
BUDGET_TIME_LIMIT_PER_MINUTE = 30.0


def _driver_options(args: argparse.Namespace):
    from tvm_pet.pipeline.options import DriverOptions, WholeBudget
    budget = getattr(args, "budget", None)
    if getattr(args, "timing_processes", 2) < 1:
        raise PetError(f"--timing-processes {args.timing_processes}: at least 1")
    if getattr(args, "promising", 1) < 1:
        raise PetError(f"--promising {args.promising}: at least 1")
    if getattr(args, "second_look_kernels", 0) < 0:
        raise PetError(f"--second-look-kernels {args.second_look_kernels}: at least 0")
    shapes = getattr(args, "input_shape", [])
    named = [name for name, _ in shapes]
    if len(set(named)) < len(named):
        raise PetError("--input-shape: one shape per input (an input is named twice, or two "
                       "shapes are given without a name)")
    trials = getattr(args, "trials", 0)
    return DriverOptions(target=getattr(args, "target", "llvm"), trials=trials or 0,
                         untuned_trials=DEFAULT_UNTUNED_TRIALS if trials is None else 0,
                         untuned_minutes=DEFAULT_UNTUNED_MINUTES if trials is None else 0,
                         budget=None if budget is None else WholeBudget.parse(budget),
                         charge=getattr(args, "charge", "beside"),
                         mutant_share=getattr(args, "mutant_share", 0.25),
                         records_dir=getattr(args, "records", None), rpc=getattr(args, "rpc", None),
                         cost=getattr(args, "cost", "measured"),
                         second_look=not getattr(args, "no_second_look", False),
                         second_look_kernels=getattr(args, "second_look_kernels", 8),
                         replicate=not getattr(args, "no_replication", False),
                         promising=getattr(args, "promising", 4),
                         seed=getattr(args, "seed", 0),
                         timing_processes=getattr(args, "timing_processes", 2),
                         confirm=getattr(args, "confirm", 3), time_limit=args.time_limit,
                         confirm_every=not getattr(args, "first_kept", False),
                         tvm_rewrites=not args.no_tvm_rewrites,
                         layout=getattr(args, "layout", "auto"),
                         fast_math=getattr(args, "fast_math", False),
                         prepack=not getattr(args, "tvm_default", False),
                         input_shapes=tuple(shapes), progress=_progress(args))


def _progress(args: argparse.Namespace) -> bool:
    """Progress lines on stderr: with ``--progress``, or on a terminal unless ``--quiet``."""
    if getattr(args, "progress", False):
        return True
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _search_config(args: argparse.Namespace):
    from tvm_pet.search.config import SearchConfig
    return SearchConfig(depth=args.depth, rounds=args.rounds, topk=args.topk,
                        time_limit=args.time_limit, progress=sys.stderr.isatty(),
                        winograd=getattr(args, "winograd", False),
                        im2col=getattr(args, "im2col", False),
                        search=getattr(args, "search", None) or "algorithm2")


def _default_time_limit(args: argparse.Namespace) -> None:
    """Fill in ``--time-limit`` where it was not given: the command's default, or more with a
    ``--budget`` in minutes (:data:`BUDGET_TIME_LIMIT_PER_MINUTE`)."""
    if getattr(args, "time_limit", 0.0) is not None:
        return
    from tvm_pet.pipeline.options import WholeBudget
    args.time_limit = BASE_TIME_LIMIT[args.command]
    budget = getattr(args, "budget", None)
    minutes = None if budget is None else WholeBudget.parse(budget).minutes
    if minutes is not None:
        args.time_limit = max(args.time_limit, BUDGET_TIME_LIMIT_PER_MINUTE * minutes)
