"""PET's search: partitioning (6.1), the mutant generator (Algorithm 1), the program optimizer
(Algorithm 2) and post-optimizations (6.3). Pure Python; the cost model is pluggable.

:mod:`~tvm_pet.search.case_studies` holds the paper's transformations at their real shapes, which
the tests and ``benchmarks/search_bench.py`` expect the generator to find; the search never reads
them."""
