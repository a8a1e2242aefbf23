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
# # Optimizing a whole model with `PETPass` and `tvm.compile`
#
# PET works on any Relax module with static shapes and float32 data. Here a seeded BERT-Base
# encoder layer (built from code, with a short sequence of 32 tokens so the notebook runs in
# seconds) goes through TVM's ONNX frontend, then through `PETPass` inside a `tvm.transform.Sequential`, and then through
# `tvm.compile` with the registered `"pet"` pipeline. The outputs are compared with the
# unoptimized module and with onnxruntime.

# %%
import numpy as np
import onnxruntime as ort
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_pet.relax
from tvm_pet.models import build_model
from tvm_pet.search.config import SearchConfig

model = build_model("bert_encoder", batch=1, seq=32, layers=1, seed=0)
mod = from_onnx(model)
x = np.random.default_rng(0).standard_normal((1, 32, 768)).astype("float32")

# %% [markdown]
# ## The pass
#
# `PETPass` lifts each Relax function into tvm_pet's IR, splits it at the non-linear operators
# (softmax, GELU, layer norm, ...), searches mutants of each multi-linear part with the optimizer
# (Algorithm 2: top-K, rounds, operator subsets), and substitutes the cheapest *verified*
# program. The default cost model is analytic (a roofline); `cost="measured"` builds and times
# every candidate kernel with TVM instead (slower, and what `tvm-pet optimize` uses).

# %%
pet = tvm_pet.relax.PETPass(target="llvm", config=SearchConfig(depth=2, rounds=1, time_limit=60))
mod_pet = tvm.transform.Sequential([pet])(mod)
report = pet.report["main"]
print("changed:", report["changed"], "|", report.get("reason", ""))
print(f"cost (analytic): {report['original_cost']:.3e} s -> {report['cost']:.3e} s")
for step in report["applied"]:
    print(f"  {step['subprogram']}: {' -> '.join(step['original_ops'])}  became  "
          f"{' -> '.join(step['mutant_ops'])}"
          f"{' (corrected)' if step['partially_equivalent'] else ''}")

# %% [markdown]
# ## Compile, run, compare
#
# `tvm.compile(..., relax_pipeline="pet")` runs the pass and then TVM's default CPU pipeline;
# with `relax.get_pipeline("pet", enable_pet=False)` it is the plain pipeline.

# %%
tvm_pet.relax.register_pipeline()
target = tvm.target.Target("llvm")
plain = tvm.compile(mod, target=target)
with target:
    optimized = tvm.compile(mod, target=target,
                            relax_pipeline=relax.get_pipeline(
                                "pet", config=SearchConfig(depth=2, rounds=1, time_limit=60)))


def run(executable):
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return out.numpy()


want = ort.InferenceSession(model.SerializeToString(),
                            providers=["CPUExecutionProvider"]).run(None, {"hidden": x})[0]
y_plain, y_pet = run(plain), run(optimized)
print("max |PET - plain TVM|   :", float(np.abs(y_pet - y_plain).max()))
print("max |PET - onnxruntime| :", float(np.abs(y_pet - want).max()))
assert np.allclose(y_pet, y_plain, rtol=1e-4, atol=1e-4)
assert np.allclose(y_pet, want, rtol=1e-3, atol=1e-4)

# %% [markdown]
# The pass never changes what the model computes: every substitution is verified (Theorems 1
# and 2) and, where partially equivalent, corrected; the result is also compared with the
# original in NumPy before it is accepted. For measured speed-ups against TVM and onnxruntime,
# see `benchmarks/run.py` and the README's table.
