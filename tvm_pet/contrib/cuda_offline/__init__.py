"""The offline CUDA workflow: build on a CPU host, time on a GPU host that has no TVM compiler.

A measuring setup for a GPU reached a few minutes at a time, not the product (``optimize`` on a
machine with a GPU tunes and times there itself):

- :mod:`~tvm_pet.contrib.cuda_offline.dry_run`: ``tvm-pet optimize MODEL --target cuda
  --dry-run``, the CUDA flow up to the first kernel run, with the artifacts that
  ``scripts/gpu/run_cuda.py`` times on the GPU;
- :mod:`~tvm_pet.contrib.cuda_offline.batch`: CUDA tuning in one batch, sampled and built here
  (``prepare_batch``), timed there (``scripts/gpu/run_batch.py``), committed here
  (``commit_batch``).

``scripts/gpu/`` holds the scripts of the GPU side and the recipe that chains them.
"""
