"""Which real models' ``optimized.onnx`` ``tvm-pet optimize`` writes from a ``.pt2`` file, and how
close onnxruntime's outputs on it are to torch's.

    python benchmarks/optimized_onnx_survey.py [--models bert gpt2 ...] [--out DIR]

Each model is built from code with seeded weights (transformers' BERT with 2 small layers, GPT-2
and Llama with one; torchvision's swin_t, convnext_tiny, mobilenet_v3_large and efficientnet_b0
at 64x64, vit_b_16 at 32x32 with its zero-initialised head drawn at random), saved with
``torch.export``, and optimized with the analytic cost, a short search and no tuning (what is
written does not depend on the budget). The table gives what the report says of
``optimized.onnx``: written (with the largest relative error of onnxruntime's outputs on it
against torch's) or why not. Needs the ``torch`` extra; results go to
``benchmarks/results/optimized_onnx_survey.{json,md}``. Nothing here is timed.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _transformer(kind: str):
    import torch
    import transformers
    from tvm_pet.testing.real_models import stub_torchvision_meta
    stub_torchvision_meta()
    torch.manual_seed(0)
    if kind == "gpt2":
        model = transformers.GPT2Model(transformers.GPT2Config(
            n_embd=32, n_layer=1, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
            eos_token_id=0)).eval()
    else:
        model = transformers.LlamaModel(transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=2, vocab_size=50, max_position_embeddings=32)).eval()

    class Hidden(torch.nn.Module):  # the last hidden state alone (not the cache)
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(ids, return_dict=False, use_cache=False)[0]

    return Hidden().eval(), (torch.randint(0, 50, (1, 12)),)


def build(name: str):
    """The torch model and its inputs."""
    from tvm_pet.testing.real_models import build_torch_model, positional_bert
    if name in ("gpt2", "llama"):
        return _transformer(name)
    if name == "bert":
        model, inputs = build_torch_model("bert")
        return positional_bert(model), tuple(inputs)
    if name == "vit_b_16":
        import torch
        from tvm_pet.testing.real_models import torchvision_models
        torch.manual_seed(0)
        model = torchvision_models().vit_b_16(weights=None, image_size=32).eval()
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)  # zero-initialised: all zeros
        return model, (torch.randn(1, 3, 32, 32),)
    model, inputs = build_torch_model(name, size=64)
    return model, tuple(inputs)


def survey(name: str, folder: pathlib.Path) -> dict:
    import numpy as np
    import onnxruntime as ort
    import torch
    from tvm_pet.pipeline import DriverOptions, optimize_model
    from tvm_pet.search.config import SearchConfig
    start = time.perf_counter()
    model, inputs = build(name)
    path = folder / f"{name}.pt2"
    with torch.no_grad():
        torch.export.save(torch.export.export(model, inputs), str(path))
        want = model(*inputs)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    report = optimize_model(str(path), folder / name,
                            SearchConfig(depth=2, rounds=1, max_subset=2, time_limit=20.0),
                            DriverOptions(cost="analytic", confirm=1, time_limit=60.0,
                                          records_dir=str(folder / "records")))
    row = {"model": name, "input": [list(x.shape) for x in inputs],
           "optimized_onnx": report["optimized_onnx"], "max_rel_error_vs_torch": None}
    if not row["optimized_onnx"].startswith("not written"):
        session = ort.InferenceSession(row["optimized_onnx"], providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})
        row["max_rel_error_vs_torch"] = max(
            float(np.abs(g - w.numpy()).max() / max(float(np.abs(w.numpy()).max()), 1e-12))
            for g, w in zip(got, want))
        row["optimized_onnx"] = "written"
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


MODELS = ("bert", "gpt2", "llama", "swin_t", "vit_b_16", "convnext_tiny", "mobilenet_v3_large",
          "efficientnet_b0")


def markdown(rows: list[dict]) -> str:
    lines = ["| model (.pt2, input) | optimized.onnx | max rel. error vs torch |", "|---|---|---|"]
    for r in rows:
        err = "-" if r["max_rel_error_vs_torch"] is None else f"{r['max_rel_error_vs_torch']:.1e}"
        shapes = ", ".join("x".join(map(str, s)) for s in r["input"]) if r.get("input") else "?"
        lines.append(f"| {r['model']} ({shapes}) | {r['optimized_onnx']} | {err} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            try:
                row = survey(name, pathlib.Path(tmp))
            except Exception as e:  # a model this environment cannot build or export
                row = {"model": name, "input": None, "optimized_onnx": f"error: {e!r:.200}",
                       "max_rel_error_vs_torch": None}
            print(f"{name}: {row['optimized_onnx']} {row['max_rel_error_vs_torch']}", flush=True)
            rows.append(row)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "optimized_onnx_survey.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    (out / "optimized_onnx_survey.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
