"""PET's search: partitioning (6.1), the mutant generator (Algorithm 1), the program optimizer
(Algorithm 2) and post-optimizations (6.3). Pure Python; the cost model is pluggable."""
