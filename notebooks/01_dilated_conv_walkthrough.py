# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # PET on a dilated convolution: mutant, differing boxes, correction, speed-up
#
# A 3×3 convolution with dilation 2 reads every other row and column. PET's Figure 3 rewrites
# it as a *regular* 3×3 convolution on a regrouped input: rows and columns are sorted by parity,
# so each parity class becomes a dense image. With the regular conv's own padding, the windows
# at the seams between parity classes read the wrong pixels. That mutant is *partially*
# equivalent: right almost everywhere, wrong on a few strided rows and columns.
#
# This notebook lets PET's verifier find exactly where, draws those regions, builds the
# correction, and times both programs with TVM. (Open it with `jupytext --to notebook` or run
# it as a script.)

# %%
import numpy as np

from tvm_pet import example_pairs
from tvm_pet.verify.corrector import correct
from tvm_pet.verify.interpreter import evaluate
from tvm_pet.verify.verifier import verify

original, mutant = example_pairs.figure3_pair(n=1, c=8, h=14, w=14, o=8, exact=False, seed=0)
print("original:", " -> ".join(n.op.value for n in original.nodes))
print("mutant:  ", " -> ".join(n.op.value for n in mutant.nodes))

# %% [markdown]
# ## Where does the mutant differ? (Theorems 1 and 2)
#
# The verifier splits the output into boxes on which every index map is affine, tests m+1
# positions per box with random values mod p = 2^31-1, and reports the boxes that differ.
# Boxes can be strided: they follow the parity classes.

# %%
result = verify(original, mutant)
diff = result.output("y")
print(f"equivalent: {result.equivalent}; {diff.tested_boxes} boxes tested, "
      f"{len(diff.boxes)} differ")
for box in diff.boxes:
    print(f"  rows {box.lo[2]}:{box.hi[2]}:{box.step[2]}  cols {box.lo[3]}:{box.hi[3]}:{box.step[3]}")
assert not result.equivalent and diff.boxes

# %% [markdown]
# The same regions, as a picture of one output channel: yellow where the mutant is wrong.
# A brute-force float comparison agrees with the verifier's boxes.

# %%
import matplotlib

matplotlib.use("Agg")  # headless; in Jupyter, plots still show inline with %matplotlib inline
import matplotlib.pyplot as plt

mask = np.zeros(diff.shape, bool)
for box in diff.boxes:
    mask |= box.mask(diff.shape)
rng = np.random.default_rng(0)
x = {"x": rng.standard_normal(original.shapes["x"])}
wrong = np.abs(evaluate(original, x, np.float64)["y"] - evaluate(mutant, x, np.float64)["y"]) > 1e-9
assert (wrong <= mask).all(), "every float difference lies inside a reported box"

fig, axes = plt.subplots(1, 2, figsize=(7, 3.4))
axes[0].imshow(mask[0, 0], cmap="viridis")
axes[0].set_title("verifier: differing boxes")
axes[1].imshow(wrong[0, 0], cmap="viridis")
axes[1].set_title("floats: |original - mutant| > 0")
for ax in axes:
    ax.set_xlabel("column")
    ax.set_ylabel("row")
fig.tight_layout()
fig.savefig("dilated_conv_boxes.png", dpi=90)
print("drew dilated_conv_boxes.png")

# %% [markdown]
# ## The correction
#
# For every differing box PET recomputes the original on that region only (slicing just the
# input it needs) and writes it over the mutant's output. The corrected program is verified
# again: now it is exactly equivalent.

# %%
fixed = correct(original, mutant, result)
print("corrected:", " -> ".join(n.op.value for n in fixed.nodes))
assert verify(original, fixed).equivalent
err = np.abs(evaluate(original, x, np.float64)["y"] - evaluate(fixed, x, np.float64)["y"]).max()
print(f"max |original - corrected| on random floats: {err:.1e}")
assert err < 1e-9

# %% [markdown]
# ## Speed, with TVM
#
# Both programs become Relax modules and are compiled for the CPU (`llvm`). Here they are
# untuned (TVM's plain loop nests), at the notebook's small size, timed interleaved over a few
# rounds. A difference smaller than the spread is noise (see `shared/CALIBRATION.md`). At the
# Table-3 size with tuned kernels the README has the measured figure: on this CPU the tuned
# dilated conv stays faster than its regular-conv mutant, and `tvm-pet optimize` keeps the
# original.

# %%
import tvm
from tvm import relax

from tvm_pet.relax.adapter import program_to_module
from tvm_pet.tune import build_with_records, time_interleaved

built = {"original": build_with_records(program_to_module(original), "llvm"),
         "corrected mutant": build_with_records(program_to_module(fixed), "llvm")}
out = relax.VirtualMachine(built["corrected mutant"], tvm.cpu())["main"](
    tvm.runtime.tensor(x["x"].astype(np.float32)))
assert np.allclose(out.numpy(), evaluate(original, x, np.float64)["y"], atol=1e-4)
timings = time_interleaved(built, [x["x"].astype(np.float32)], rounds=3, number=3, repeat=3)
for name, t in timings.items():
    print(f"{name:17s} median {1e6 * t.median:8.1f} us  [{1e6 * t.min:.1f}-{1e6 * t.max:.1f}]")
ratio = timings["original"].median / timings["corrected mutant"].median
print(f"original / corrected mutant: x{ratio:.2f} (untuned, small size; noise is about ±20-30 %)")
