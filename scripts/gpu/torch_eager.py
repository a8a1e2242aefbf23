"""PyTorch eager on the GPU: the same models, built from code with the same seeded weights.

Runs on the GPU machine (PyTorch, onnx and numpy there; no TVM) from the repository root::

    python scripts/gpu/torch_eager.py conv5x5 dilated_conv ... --out RESULTS/torch_eager.json

Each model is built by ``tvm_pet.models.build_model`` (ONNX, seeded weights) and run by a small
interpreter of its ONNX graph with ``torch.nn.functional`` (Conv, MatMul, Relu and MaxPool for
the Table-3 graphs and CSRNet; BatchNormalization, GlobalAveragePool, Flatten and Gemm for
ResNet-18; AveragePool and Concat for Inception-v3; Conv, MaxPool and GlobalAveragePool in 3-D
for ResNet3D-18; Add, Mul, Reshape, Transpose, Softmax, LayerNormalization and
Erf for BERT; an op without a rule stops it with its name). TF32 is off, so that PyTorch
computes in float32 as TVM does. Times: CUDA events around ``--number`` calls, ``--rounds``
samples, median kept.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _padding(a, dims: int) -> tuple:
    """ONNX's ``pads`` (begins, then ends) as PyTorch's padding, which is symmetric."""
    pads = a.get("pads", [0] * (2 * dims))
    if pads[:dims] != pads[dims:]:
        raise SystemExit(f"torch_eager.py: asymmetric pads {pads}")
    return tuple(pads[:dims])


def _conv(args, a):
    import torch.nn.functional as F
    dims = args[1].dim() - 2  # conv2d, or conv3d for ResNet3D-18
    conv = {2: F.conv2d, 3: F.conv3d}[dims]
    return conv(args[0], args[1], args[2] if len(args) > 2 else None,
                stride=a.get("strides", 1), padding=_padding(a, dims),
                dilation=a.get("dilations", 1), groups=a.get("group", 1))


def _max_pool(args, a):
    import torch.nn.functional as F
    dims = len(a["kernel_shape"])
    pool = {2: F.max_pool2d, 3: F.max_pool3d}[dims]
    return pool(args[0], a["kernel_shape"], a.get("strides", a["kernel_shape"]),
                _padding(a, dims), ceil_mode=bool(a.get("ceil_mode", 0)))


def _average_pool(args, a):
    import torch.nn.functional as F
    dims = len(a["kernel_shape"])
    pool = {2: F.avg_pool2d, 3: F.avg_pool3d}[dims]
    return pool(args[0], a["kernel_shape"], a.get("strides", a["kernel_shape"]),
                _padding(a, dims), ceil_mode=bool(a.get("ceil_mode", 0)),
                count_include_pad=bool(a.get("count_include_pad", 0)))


def _reshape(args, a):
    shape = [int(d) for d in args[1].tolist()]  # ONNX: 0 keeps the input's dimension
    return args[0].reshape([args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)])


def _layer_norm(args, a):
    import torch.nn.functional as F
    axis = a.get("axis", -1) % args[0].dim()
    return F.layer_norm(args[0], args[0].shape[axis:], args[1],
                        args[2] if len(args) > 2 else None, a.get("epsilon", 1e-5))


def _batch_norm(args, a):  # inference: the running statistics
    import torch.nn.functional as F
    return F.batch_norm(args[0], args[3], args[4], args[1], args[2], training=False,
                        eps=a.get("epsilon", 1e-5))


def _gemm(args, a):
    import torch
    x = args[0].T if a.get("transA", 0) else args[0]
    w = args[1].T if a.get("transB", 0) else args[1]
    out = a.get("alpha", 1.0) * torch.matmul(x, w)
    return out + a.get("beta", 1.0) * args[2] if len(args) > 2 else out


def _rules() -> dict:
    import torch
    return {"Conv": _conv, "MaxPool": _max_pool, "AveragePool": _average_pool,
            "Reshape": _reshape,
            "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
            "Gemm": _gemm,
            "GlobalAveragePool": lambda args, a: args[0].mean(
                dim=tuple(range(2, args[0].dim())), keepdim=True),
            "Concat": lambda args, a: torch.cat(args, a["axis"]),
            "Flatten": lambda args, a: args[0].flatten(a.get("axis", 1)),
            "MatMul": lambda args, a: torch.matmul(args[0], args[1]),
            "Relu": lambda args, a: torch.relu(args[0]),
            "Add": lambda args, a: args[0] + args[1],
            "Mul": lambda args, a: args[0] * args[1],
            "Div": lambda args, a: args[0] / args[1],
            "Erf": lambda args, a: torch.erf(args[0]),
            "Transpose": lambda args, a: args[0].permute(*a["perm"]),
            "Softmax": lambda args, a: torch.softmax(args[0], a.get("axis", -1))}


def torch_function(model, device):
    """A callable running the ONNX graph with PyTorch on ``device``."""
    import torch
    from onnx import numpy_helper
    RULES = _rules()
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()).to(device)
               for t in model.graph.initializer}

    def run(*inputs):
        env = dict(weights)
        env.update({i.name: x for i, x in zip(model.graph.input, inputs)})
        for node in model.graph.node:
            args = [env[n] for n in node.input if n]
            a = _attrs(node)
            if node.op_type in RULES:
                out = RULES[node.op_type](args, a)
            else:
                raise SystemExit(f"torch_eager.py: no rule for {node.op_type}")
            env[node.output[0]] = out
        return [env[o.name] for o in model.graph.output]
    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--number", type=int, default=20)
    args = parser.parse_args(argv)
    import torch
    from tvm_pet.models import build_model
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda")
    rows = {}
    for name in args.models:
        model = build_model(name)
        rng = np.random.default_rng(0)
        inputs = [torch.from_numpy(rng.standard_normal(
            [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)).to(device)
            for i in model.graph.input]
        run = torch_function(model, device)
        with torch.inference_mode():
            for _ in range(3):
                run(*inputs)
            samples = []
            for _ in range(args.rounds):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                for _ in range(args.number):
                    run(*inputs)
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) / args.number)
        rows[name] = {"median_ms": statistics.median(samples), "samples_ms": samples}
        print(f"{name}: torch eager {rows[name]['median_ms']:.3f} ms", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(0),
                                    "torch": torch.__version__, "tf32": False,
                                    "rounds": args.rounds, "number": args.number,
                                    "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
