"""Helpers for the tests and the benchmarks, never used by the optimizer itself.

- :mod:`~tvm_pet.testing.bruteforce`: both programs evaluated in float64 at every output position,
  and the verifier's boxes checked against the positions that differ (sound and tight);
- :mod:`~tvm_pet.testing.modp_oracle`: whole programs evaluated exactly in Z_p, so that a corrected
  program can be compared with its original with no tolerance;
- :mod:`~tvm_pet.testing.real_models`: torchvision and transformers definitions with seeded
  weights, exported with ``torch.export`` (needs the ``torch`` extra).

The tests, the fuzzer (``tests/fuzz_e2e.py``) and the benchmarks import these modules; nothing
under ``tvm_pet`` outside this subpackage does. The oracles need no TVM.
"""
