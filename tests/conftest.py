"""How the tests share code.

Shared helpers live in modules of the ``tests`` package, and every test imports them one way,
as ``from tests.<module> import ...``; pytest puts the repository root on ``sys.path``
(``pythonpath`` in ``pyproject.toml``). A test module never imports another test module.

- :mod:`tests.strategies`: hypothesis strategies (random multi-linear programs and mutants);
- :mod:`tests.records`: small tuning tasks and hand-written record databases;
- :mod:`tests.dilated`: dilated-convolution models and the cost models that make rewriting them
  pay, for the optimizer, ``PETPass``, ``tvm-pet optimize`` and tuning tests;
- :mod:`tests.fuzz_e2e`, :mod:`tests.onnx_suite`, :mod:`tests.bad_inputs`: the reliability runs,
  which ``benchmarks/reliability.py`` runs in full outside pytest.

The README's test command (``--doctest-modules tests tvm_pet``) also runs the examples in these
modules' docstrings. What it must not import is listed in the repository's ``conftest.py``.
"""
