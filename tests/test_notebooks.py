"""Smoke test: every notebook (jupytext percent-format ``.py`` under ``notebooks/``) runs to the
end as a script, with its own assertions, headless, in a scratch directory."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_notebooks_are_found():
    assert [p.name for p in NOTEBOOKS] == ["01_dilated_conv_walkthrough.py",
                                           "02_full_model_petpass.py"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(notebook, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(notebook)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if notebook.stem.startswith("01"):
        assert (tmp_path / "dilated_conv_boxes.png").stat().st_size > 1000
        assert "equivalent: False" in proc.stdout
    else:
        assert "max |PET - onnxruntime|" in proc.stdout
