"""Equal total trials: is PET's gain its rewrites', or the trials spent tuning its mutants?

    python benchmarks/equal_total.py --models csrnet_backend --layout NHWC --seeds 3,4 --trials 32
    python benchmarks/equal_total.py --models csrnet_backend --budget 292 --charge inside
    python benchmarks/equal_total.py --models torchvision:squeezenet1_1 --budget 400 \
        --charge inside --layout NCHW
    python benchmarks/equal_total.py --render

``optimize`` charges PET's mutant kernels *beside* the budget: TVM's kernels get N trials per
task, and PET's mutants get N per task more (``mutant_trials`` in ``report.json``). So PET's
side has measured more candidates in all than TVM's, and a careful reader asks whether TVM,
given those trials for its own kernels, would be as fast. For each model and seed this script:

1. runs ``tvm-pet optimize`` on an empty records folder, with N trials per task and the seed,
   no second look: TVM's build (``baseline.so``), PET's (``optimized.so``; the original where
   PET kept it) and the trials the whole run measured (the original's and the mutants');
2. copies those records and gives the mutants' trials to the original instead: MetaSchedule's
   gradient task scheduler over the original's tasks (:func:`~tvm_pet.tune.tuner.tune_budget`)
   up to the run's total. That is TVM at *equal total trials*, built from the copy;
3. times the three builds interleaved in fresh processes (3 by default: a binary's speed is
   drawn once per process, ``tvm_pet.tune.process_timing``), after checking that their
   outputs agree.

With ``--budget B --charge inside`` step 1 is ``tvm-pet optimize --budget B --charge inside``
instead: PET's mutants are charged within B (``--mutant-share`` of it at most), so that run
measures B trials in all, and TVM at equal total is the original tuned to B. Its TVM column is
then the original as that run left it (B less what the mutants' kernels hold).

Ratios are each process's ratio of medians, geo-meaned over the processes. Rows go to
``results/equal_total.json`` and ``.md`` (each run's rows replace those of the same model,
layout and seed). The records stay in ``--work``, outside the repository.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import geomean  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: The prefix of a torchvision model's name in ``--models``.
TORCHVISION = "torchvision:"
#: Each ratio of a row: (the slower build, the faster build) when it is above 1.
RATIOS = {"pet_vs_tvm": ("tvm", "pet"), "pet_vs_tvm_equal": ("tvm_equal", "pet"),
          "tvm_equal_vs_tvm": ("tvm", "tvm_equal")}


def process_ratio(times: dict, slow: str, fast: str) -> tuple[float, list[float]]:
    """``slow`` over ``fast``: the geo-mean over processes of each process's ratio of medians,
    and those ratios (above 1: ``fast`` is faster)."""
    ratios = [a / b for a, b in zip(times[slow]["by_process_ms"], times[fast]["by_process_ms"])]
    return geomean(ratios), ratios


def ratios(times: dict) -> dict:
    """Every ratio of :data:`RATIOS` (``<key>``) and its process ratios (``<key>_by_process``)."""
    out = {}
    for key, (slow, fast) in RATIOS.items():
        out[key], out[key + "_by_process"] = process_ratio(times, slow, fast)
    return out


def optimize_run(onnx_path: pathlib.Path, records: pathlib.Path, out: pathlib.Path, *,
                 seed: int, args) -> dict:
    """Step 1: ``tvm-pet optimize`` on empty records (``args.trials`` per task, or within
    ``args.budget`` with the mutants charged as ``args.charge`` says); its report."""
    tuning = (["--trials", str(args.trials)] if args.budget is None else
              ["--budget", str(args.budget), "--charge", args.charge, "--mutant-share",
               str(args.mutant_share)])
    cmd = [sys.executable, "-m", "tvm_pet.cli", "optimize", str(onnx_path), "--target",
           args.target, "--out", str(out), *tuning, "--seed", str(seed), "--records",
           str(records), "--layout", args.layout, "--no-second-look", "--progress"]
    subprocess.run(cmd, check=True)
    return json.loads((out / "report.json").read_text())


def tune_equal(loaded, records: pathlib.Path, library: pathlib.Path, *, total: int, seed: int,
               target: str) -> dict:
    """Step 2: the ``loaded`` model's tasks tuned up to ``total`` trials in all (the records'
    own count included) by the gradient task scheduler, built and exported to ``library``."""
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    from tvm_pet.tune.tuner import tune_budget

    toolchain = tvm_toolchain(target, str(records), None).with_lowering(loaded.lower)
    module = toolchain.lower(loaded.program)
    stats = tune_budget(module, toolchain.target, total, str(records), seed=seed,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    toolchain.export(toolchain.build(module), str(library))
    return {"new_trials": stats.new_trials, "tuning_time_s": round(stats.wall_s, 1),
            "tasks_given_trials": {t.name: t.new_trials for t in stats.per_task
                                   if t.new_trials}}


def outputs(library: pathlib.Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    import tvm
    from tvm import relax
    device = tvm.cpu()
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), device)
    res = vm["main"](*[tvm.runtime.tensor(x, device) for x in inputs])
    return [res.numpy()] if hasattr(res, "numpy") else [r.numpy() for r in res]


def time_builds(libraries: dict[str, pathlib.Path], inputs: list[np.ndarray], *,
                processes: int, rounds: int, number: int) -> dict:
    """Step 3: the builds' outputs compared with TVM's, then timed interleaved in fresh
    processes; per build its median and each process's median in ms, and its largest
    difference from TVM's outputs."""
    from tvm_pet.tune.process_timing import time_in_processes
    reference = outputs(libraries["tvm"], inputs)
    errors = {name: max(float(np.abs(a - b).max())
                        for a, b in zip(reference, outputs(path, inputs)))
              for name, path in libraries.items()}
    timed = time_in_processes({k: str(v) for k, v in libraries.items()}, inputs,
                              processes=processes, rounds=rounds, number=number, repeat=3)
    return {name: {"median_ms": t.median * 1e3, "by_process_ms": [x * 1e3 for x in t.layouts],
                   "max_abs_err_vs_tvm": errors[name]} for name, t in timed.items()}


def torchvision_file(name: str, work: pathlib.Path, size: int):
    """torchvision's ``name`` (random seeded weights, ``weights=None``) at ``size`` x ``size``,
    exported with ``torch.export`` and saved as a ``.pt2`` file in ``work``: the file and the
    torch model."""
    import torch

    from tvm_pet.testing.real_models import build_torch_model
    model, inputs = build_torch_model(name, size=size)
    path = work / f"{name}.pt2"
    with torch.no_grad():
        torch.export.save(torch.export.export(model, tuple(inputs)), str(path))
    return path, model


def against_torch(times: dict, libraries: dict[str, pathlib.Path], model,
                  inputs: list[np.ndarray]) -> None:
    """Add each build's largest relative error against the torch model on ``inputs`` to its
    entry of ``times`` (``max_rel_err_vs_torch``)."""
    import torch

    from tvm_pet.testing.real_models import max_relative_error, torch_outputs
    want = torch_outputs(model, [torch.from_numpy(x) for x in inputs])
    for name, path in libraries.items():
        times[name]["max_rel_err_vs_torch"] = max_relative_error(outputs(path, inputs), want)


def draw(model: str, seed: int, args) -> dict:
    """One row: a model tuned afresh with ``seed``, both ways of spending the total."""
    import onnx

    from tvm_pet.models import build_model
    from tvm_pet.pipeline.optimize import load_model, random_inputs
    from tvm_pet.pipeline.options import DriverOptions

    name = f"{model.replace(':', '-')}-{args.layout.lower()}-s{seed}"
    work = pathlib.Path(args.work) / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    torch_model = None
    if model.startswith(TORCHVISION):
        model_path, torch_model = torchvision_file(model[len(TORCHVISION):], work, args.size)
    else:
        model_path = work / f"{model}.onnx"
        onnx.save(build_model(model), str(model_path))
    start = time.perf_counter()
    report = optimize_run(model_path, work / "records", work / "optimize", seed=seed, args=args)
    tuning = report["tuning"]
    shutil.copytree(work / "records", work / "records-equal")
    # the model as optimize loaded it: its lowering in the layout, its inputs
    loaded = load_model(str(model_path), DriverOptions(target=args.target, layout=args.layout))
    equal = tune_equal(loaded, work / "records-equal", work / "tvm_equal.so",
                       total=tuning["new_trials"], seed=seed, target=args.target)
    libraries = {"tvm": work / "optimize" / "baseline.so",
                 "pet": work / "optimize" / "optimized.so", "tvm_equal": work / "tvm_equal.so"}
    inputs = list(random_inputs(loaded.program, seed).values())
    times = time_builds(libraries, inputs, processes=args.processes, rounds=args.rounds,
                        number=args.number)
    if torch_model is not None:  # the builds against torch itself, on the same inputs
        against_torch(times, libraries, torch_model, inputs)
    return {"model": model, "layout": args.layout, "seed": seed,
            "input": [list(x.shape) for x in inputs],
            "trials_per_task": tuning["trials_per_task"], "spend": spend(args),
            "inside_budget": tuning.get("inside_budget"), "kept": report["kept"],
            "applied": [a["mutant"] for a in report["applied"]],
            "total_trials": tuning["new_trials"], "mutant_trials": tuning["mutant_trials"],
            "tvm_equal_tuning": equal, "times": times, "processes": args.processes,
            "wall_s": round(time.perf_counter() - start)} | ratios(times)


def spend(args) -> str:
    """How a row's trials were given: per task, or a whole-model budget and the mutants'
    charge."""
    if args.budget is None:
        return f"{args.trials}/task"
    # inside rows since acb84a5: the reserve counts a new pad at one trial (before: full trials)
    share = (f", share {args.mutant_share:g}, pads reserved 1" if args.charge == "inside"
             else "")
    return f"{args.budget} in all, mutants {args.charge}{share}"


def counted(row: dict) -> float:
    """PET / TVM at N trials per task, ×1 where PET kept the original (both run one binary)."""
    return row["pet_vs_tvm"] if row["kept"] == "optimized" else 1.0


def row_spend(row: dict) -> str:
    """A row's :func:`spend` (rows written before it: trials per task)."""
    return row.get("spend", f"{row['trials_per_task']}/task")


def render(rows: list[dict]) -> str:
    lines = [
        "# Equal total trials: TVM given PET's mutant trials",
        "",
        "`python benchmarks/equal_total.py` (see its docstring). Per draw: one `tvm-pet optimize` "
        "on empty records (N trials per task for the original's kernels and PET's mutants, no "
        "second look); then the original alone tuned on a copy of those records up to the run's "
        "total by MetaSchedule's gradient task scheduler (TVM at equal total trials). The three "
        "builds timed interleaved in fresh processes (each row's count in the JSON); ratios are "
        "geo-means over the processes of each one's ratio of medians (by process in brackets). "
        "Rows whose trials say \"mutants inside\" ran `tvm-pet optimize --budget B --charge "
        "inside` instead, so PET + TVM measured B trials in all: their TVM column is the "
        "original as that run left it (B less what the mutants' kernels hold), and TVM at "
        "equal total the original tuned up to B.",
        "",
        "| model | layout | seed | trials | total trials (mutants') | PET kept | TVM ms | "
        "TVM equal-total ms | PET ms | PET / TVM | PET / TVM equal-total | TVM equal / TVM |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["times"]
        kept = " · ".join(r["applied"]) if r["kept"] == "optimized" else "original"
        cells = [r["model"], r["layout"], str(r["seed"]), row_spend(r),
                 f"{r['total_trials']} ({r['mutant_trials']})", kept,
                 f"{t['tvm']['median_ms']:.2f}", f"{t['tvm_equal']['median_ms']:.2f}",
                 f"{t['pet']['median_ms']:.2f}"]
        for key in RATIOS:
            measured = f"×{r[key]:.3f} ({', '.join(f'{x:.2f}' for x in r[key + '_by_process'])})"
            same = key == "pet_vs_tvm" and r["kept"] != "optimized"
            cells.append(f"×1 (same binary; measured {measured})" if same else measured)
        lines.append("| " + " | ".join(cells) + " |")
    checked = [r for r in rows if "max_rel_err_vs_torch" in r["times"]["pet"]]
    if checked:
        lines += ["", "Checked against torch on the timing inputs (torchvision models: largest "
                      "error relative to the output's scale):", ""]
        lines += [f"- {r['model']} ({r['layout']}, seed {r['seed']}, input "
                  f"{'x'.join(map(str, r['input'][0]))}): " + ", ".join(
                      f"{name} {t['max_rel_err_vs_torch']:.1e}" for name, t in r["times"].items())
                  for r in checked]
    by_model: dict[tuple, list[dict]] = {}
    for r in rows:
        by_model.setdefault((r["model"], r["layout"], row_spend(r)), []).append(r)
    lines += ["", "Geo-means over draws:", ""]
    for (model, layout, trials), group in by_model.items():
        equal, extra = ([r[key] for r in group] for key in ("pet_vs_tvm_equal", "tvm_equal_vs_tvm"))
        draws = f"{len(group)} draw" + ("s" if len(group) != 1 else "")
        lines.append(f"- {model} ({layout}, {trials}, {draws}): PET / TVM "
                     f"×{geomean([counted(r) for r in group]):.3f}, PET / TVM at equal total "
                     f"×{geomean(equal):.3f}, TVM's own gain from the extra trials "
                     f"×{geomean(extra):.3f}")
    return "\n".join(lines) + "\n"


def save(rows: list[dict], path: pathlib.Path) -> None:
    """Merge ``rows`` into ``path`` (replacing same model, layout, seed, trials) and render."""
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    key = lambda r: (r["model"], r["layout"], r["seed"], row_spend(r))  # noqa: E731
    new = {key(r) for r in rows}
    merged = sorted([r for r in old if key(r) not in new] + rows, key=key)
    path.write_text(json.dumps({"rows": merged}, indent=1) + "\n")
    path.with_suffix(".md").write_text(render(merged))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="csrnet_backend",
                   help="our models by name, or torchvision's as torchvision:NAME")
    p.add_argument("--size", type=int, default=224,
                   help="torchvision models: the input image side (default 224)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--budget", type=int, help="trials for the whole model instead of --trials")
    p.add_argument("--charge", choices=("beside", "inside"), default="beside")
    p.add_argument("--mutant-share", type=float, default=0.25)
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NHWC")
    p.add_argument("--target", default="llvm")
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--number", type=int, default=5)
    p.add_argument("--work", default="/tmp/equal_total")
    p.add_argument("--out", default=str(RESULTS / "equal_total.json"))
    p.add_argument("--render", action="store_true", help="only write the .md again")
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    if args.render:
        out.with_suffix(".md").write_text(render(json.loads(out.read_text())["rows"]))
        return 0
    for model in args.models.split(","):
        for seed in map(int, args.seeds.split(",")):
            row = draw(model, seed, args)
            save([row], out)  # after each draw: a long run keeps what it measured
            print(json.dumps({k: row[k] for k in ("model", "seed", "kept", "pet_vs_tvm",
                                                  "pet_vs_tvm_equal", "tvm_equal_vs_tvm")}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
