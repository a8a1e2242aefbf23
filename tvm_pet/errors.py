"""The exceptions tvm_pet raises. Every message names the offending thing and, where it can, the fix."""


class PetError(Exception):
    """Base class of every error tvm_pet raises on purpose."""


class ShapeError(PetError):
    """A tensor shape does not fit the operator or program that uses it."""


class UnsupportedOperator(PetError):
    """An operator (or an attribute of one) that this part of tvm_pet cannot handle."""


class VerificationError(PetError):
    """Two programs cannot be compared: their signatures differ, or one is not multi-linear."""


class ProgramError(PetError):
    """A malformed program: bad topological order, a name defined twice, a missing tensor."""


class ModelError(PetError):
    """A model file that cannot be read, or that uses a feature tvm_pet does not support."""
