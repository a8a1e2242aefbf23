"""``python -m tvm_pet.cli``: the ``tvm-pet`` console script."""
import sys

from tvm_pet.cli import main

sys.exit(main())
