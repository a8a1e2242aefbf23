"""Tooling around tvm_pet that is not part of its core: measuring setups and their helpers.

Nothing in ``tvm_pet``'s core imports from here.
"""
