"""Cost models behind one Protocol: analytic (no TVM) and, later, measured with TVM."""
