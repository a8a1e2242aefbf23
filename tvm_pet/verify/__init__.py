"""Interpreters, box analysis, the verifier (Theorems 1 and 2) and the corrector."""
