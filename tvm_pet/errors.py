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


class KernelBuildError(PetError):
    """TVM cannot compile one of a program's kernels (its own code generation fails on it)."""

    @classmethod
    def compiling(cls, kind: str, error: Exception) -> "KernelBuildError":
        """The error for TVM's own ``error`` while compiling for target kind ``kind``."""
        return cls(f"TVM cannot compile it for {kind} ({tvm_words(error)})")

    def in_original(self) -> "KernelBuildError":
        """This error, said of the model as imported (nothing of PET's in it)."""
        return KernelBuildError(f"TVM cannot build the model as imported, before any PET "
                                f"rewrite: {self}")


def tvm_words(error: Exception) -> str:
    """An error TVM raised, in one line for a message: its type and the first two lines of its
    text (an LLVM verifier error says what failed on the second)."""
    words = " ".join(line.strip() for line in str(error).splitlines()[:2]).strip()
    return f"{type(error).__name__}: {(words or 'no message')[:200]}"
