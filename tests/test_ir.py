"""IR: frozen nodes, shape rules, check_program, rule tables covering every operator."""
import dataclasses

import numpy as np
import pytest

from tvm_pet.errors import ProgramError, ShapeError
from tvm_pet.ir import Attrs, Node, Op, Program, ProgramBuilder, TensorSpec, check_program
from tvm_pet.ir.shapes import ARITY, SHAPE_RULES
from tvm_pet.ops.float_eval import FLOAT_RULES
from tvm_pet.ops.gather import GATHER_RULES
from tvm_pet.ops.labels import LABEL_RULES
from tvm_pet.ops.restrict import RESTRICT_RULES


def test_every_table_covers_every_operator():
    multilinear = set(Op) - {Op.OPAQUE}
    assert set(SHAPE_RULES) == set(ARITY) == set(FLOAT_RULES) == set(Op)
    assert set(GATHER_RULES) == set(LABEL_RULES) == set(RESTRICT_RULES) == multilinear


def test_nodes_and_attrs_are_frozen():
    node = Node(Op.TRANSPOSE, ("x",), ("y",), {"perm": [1, 0]})
    assert node.attrs["perm"] == (1, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = Op.ADD
    with pytest.raises(AttributeError):
        node.attrs.perm = (0, 1)
    assert hash(node) == hash(Node(Op.TRANSPOSE, ("x",), ("y",), Attrs({"perm": (1, 0)})))


def test_weights_are_read_only():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    p = b.build([b.matmul(x, b.weight("w", np.ones((3, 4))))])
    with pytest.raises(ValueError):
        p.weights["w"][0, 0] = 5


def test_shape_error_names_the_node():
    b = ProgramBuilder()
    x = b.input("x", (1, 3, 8, 8))
    w = b.weight("w", np.ones((4, 5, 3, 3)))
    with pytest.raises(ShapeError, match="Conv"):
        b.conv(x, w)


def test_check_program_catches_order_and_double_definition():
    spec = (TensorSpec("x", (2, 2)),)
    bad_order = (Node(Op.ADD, ("y", "x"), ("z",)), Node(Op.ADD, ("x", "x"), ("y",)))
    with pytest.raises(ProgramError, match="topological"):
        Program(spec, {}, bad_order, ("z",))
    twice = (Node(Op.ADD, ("x", "x"), ("y",)), Node(Op.ADD, ("x", "x"), ("y",)))
    with pytest.raises(ProgramError, match="defined twice"):
        Program(spec, {}, twice, ("y",))
    with pytest.raises(ProgramError, match="never defined"):
        Program(spec, {}, (), ("nope",))
    with pytest.raises(ShapeError, match="zero-size"):
        Program((TensorSpec("x", (0, 2)),), {}, (), ("x",))


def test_check_program_accepts_a_good_program():
    b = ProgramBuilder()
    x = b.input("x", (1, 4, 6, 6))
    parts = b.split(x, 1, (1, 3))
    y = b.concat([parts[1], parts[0]], 1)
    p = b.build([b.reshape_transpose(y, (1, 4, 3, 2, 6), (0, 1, 3, 2, 4), (1, 4, 6, 6))])
    assert check_program(p) is p
    assert p.shapes[p.outputs[0]] == (1, 4, 6, 6)
    assert "Split" in p.describe()


@pytest.mark.parametrize("op,shapes,attrs", [
    (Op.MATMUL, [(2, 3), (4, 5)], {}),
    (Op.CONCAT, [(2, 3), (2, 4)], {"axis": 0}),
    (Op.SPLIT, [(2, 3)], {"axis": 1, "sizes": (1, 1)}),
    (Op.SLICE, [(4,)], {"starts": (3,), "steps": (1,), "sizes": (2,)}),
    (Op.RESHAPE, [(2, 3)], {"shape": (4, 2)}),
    (Op.TRANSPOSE, [(2, 3)], {"perm": (0, 0)}),
    (Op.PAD, [(2, 3)], {"pads": (0, -1, 0, 0)}),
    (Op.UPDATE, [(4, 4), (2, 2)], {"starts": (3, 0), "steps": (1, 1)}),
    (Op.BATCHNORM, [(1, 3, 2), (2,), (3,)], {}),
])
def test_shape_rules_reject_bad_shapes(op, shapes, attrs):
    with pytest.raises(ShapeError):
        SHAPE_RULES[op](Attrs(attrs), shapes)


def test_fill_is_a_uniform_constant_everywhere():
    """FILL: float value, exact rational mod p, trivial boxes, ONNX export as a Constant."""
    from fractions import Fraction

    from tvm_pet.onnx import export_model
    from tvm_pet.ops.modp import P
    from tvm_pet.testing.modp_oracle import evaluate_modp
    from tvm_pet.verify.interpreter import evaluate
    from tvm_pet.verify.verifier import verify
    import onnxruntime as ort

    b = ProgramBuilder()
    x = b.input("x", (1, 2, 4, 4))
    w = b.fill((2, 1, 3, 3), Fraction(1, 9))
    y = b.conv(x, w, pads=1, groups=2, out="y")
    conv_mean = b.build([y])
    b2 = ProgramBuilder()
    x2 = b2.input("x", (1, 2, 4, 4))
    pool = b2.build([b2.avgpool(x2, 3, 1, 1, count_include_pad=True, out="y")])
    xv = np.random.default_rng(0).standard_normal((1, 2, 4, 4))
    np.testing.assert_allclose(evaluate(conv_mean, {"x": xv}, np.float64)["y"],
                               evaluate(pool, {"x": xv}, np.float64)["y"], rtol=1e-12)
    xi = np.random.default_rng(1).integers(0, P, (1, 2, 4, 4))
    np.testing.assert_array_equal(evaluate_modp(conv_mean, {"x": xi})["y"],
                                  evaluate_modp(pool, {"x": xi})["y"])
    assert verify(pool, conv_mean).equivalent
    session = ort.InferenceSession(export_model(conv_mean).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": xv.astype(np.float32)})
    want = evaluate(pool, {"x": xv}, np.float64)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fill_survives_an_onnx_round_trip_exactly():
    from fractions import Fraction

    from tvm_pet.ir import Op
    from tvm_pet.onnx import export_model, import_model
    from tvm_pet.verify.verifier import verify

    b = ProgramBuilder()
    x = b.input("x", (1, 2, 5, 5))
    y = b.conv(x, b.fill((2, 1, 3, 3), Fraction(1, 9)), pads=1, groups=2, out="y")
    program = b.build([y])
    back = import_model(export_model(program))
    fills = [n for n in back.nodes if n.op is Op.FILL]
    assert len(fills) == 1 and fills[0].attrs["value"] == (1, 9)
    assert verify(program, back).equivalent


def test_structural_keys_of_a_program_deeper_than_pythons_recursion():
    """EfficientNet and ConvNeXt through ``torch.export`` are chains of thousands of bindings;
    the key of such a program is computed without recursion, and a renamed copy has the same."""
    import sys

    from tvm_pet.ir.keys import canonical

    def chain(prefix):
        b = ProgramBuilder(prefix=prefix)
        x = b.input(f"{prefix}x", (1, 4))
        w = b.weight(f"{prefix}w", np.full((1, 4), 0.5, dtype=np.float32))
        for _ in range(2 * sys.getrecursionlimit()):
            x = b.add(b.opaque("Relu", [x])[0], w)
        return b.build([x])

    first, second = chain("a"), chain("b")
    assert len(first.nodes) >= 4 * sys.getrecursionlimit()
    key, leaves = canonical(first)
    assert key == canonical(second)[0]
    assert leaves == ["ax", "aw"]
