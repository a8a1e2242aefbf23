"""Cost models behind one Protocol (:mod:`tvm_pet.cost.model`): the analytic one, without TVM.

The measured model, which needs TVM, lives on the TVM side (:mod:`tvm_pet.tune.measured_cost`).
Nothing here imports ``tvm_pet.relax``, ``tvm_pet.search`` or ``tvm_pet.tune``.
"""
