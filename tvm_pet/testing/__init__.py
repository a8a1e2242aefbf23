"""Oracles for the tests: slow, exhaustive evaluations that the optimizer itself never runs.

- :mod:`~tvm_pet.testing.bruteforce`: both programs evaluated in float64 at every output position,
  and the verifier's boxes checked against the positions that differ (sound and tight);
- :mod:`~tvm_pet.testing.modp_oracle`: whole programs evaluated exactly in Z_p, so that a corrected
  program can be compared with its original with no tolerance.

The tests, the fuzzer (``tests/fuzz_e2e.py``) and ``benchmarks/reliability.py`` import these
modules; nothing under ``tvm_pet`` outside this subpackage does. They need no TVM.
"""
