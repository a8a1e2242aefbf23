"""ONNX models made ready for TVM's ``from_onnx``: input shapes set, and what TVM 0.27 reads
wrongly mended (:mod:`tvm_pet.relax.frontends` calls these before every ONNX import).

- :func:`set_input_shapes`: ``--input-shape``, the static shapes of inputs with dynamic
  dimensions (a ``torch.onnx.export`` batch axis);
- :func:`fold_shape_computations`: with those shapes set, the shape arithmetic an exporter wrote
  (``Shape``, ``Gather``, ``Concat``, ``Equal``, ``Where``, ...) folded into constants: TVM's
  frontend cannot compare the symbolic shapes it would make of dynamic dimensions, and imports
  some of that arithmetic on static shapes as computations it cannot make static again;
- :func:`mend_onnx_model`: operators TVM's converters import wrongly;
- :func:`dynamic_shape_cause`: where no folding can help, the operator whose output shape is
  known only at run time, and why, for the error ``tvm-pet`` gives.
"""
from __future__ import annotations

import numpy as np

from tvm_pet.errors import ModelError


def set_input_shapes(onnx_model, shapes: dict, name: str = "the ONNX model"):
    """``onnx_model`` with the dynamic dimensions of some of its inputs set (a copy; the model
    itself when ``shapes`` is empty), as ``tvm-pet``'s ``--input-shape`` sets them.

    Args:
        onnx_model: an ONNX ``ModelProto``.
        shapes: the whole shape of each input to set, by input name; the key None stands for the
            model's only input. A dimension the model fixes must be given as it is.
        name: the model in words, for errors.

    Returns:
        The ``ModelProto`` with those inputs' shapes static.

    Raises:
        ModelError: a name that is no input of the model, None for a model with several inputs,
            a shape of another rank, or one that changes a static dimension.

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    >>> m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
    ...                                        "g", [x], [y]))
    >>> fixed = set_input_shapes(m, {None: (2, 4)})
    >>> [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim]
    [2, 4]
    """
    if not shapes:
        return onnx_model
    initializers = {t.name for t in onnx_model.graph.initializer}
    inputs = {vi.name: vi for vi in onnx_model.graph.input if vi.name not in initializers}
    if None in shapes and len(inputs) != 1:
        raise ModelError(f"{name} has {len(inputs)} inputs ({_listed(inputs)}): name the one "
                         f"each shape is for, as NAME:D0,D1,...")
    fixed = type(onnx_model)()
    fixed.CopyFrom(onnx_model)
    by_name = {vi.name: vi for vi in fixed.graph.input}
    for key, dims in shapes.items():
        key = next(iter(inputs)) if key is None else key
        if key not in inputs:
            raise ModelError(f"{name} has no input {key!r}; its inputs: {_listed(inputs)}")
        _set_dims(by_name[key], tuple(dims), name)
    return fixed


def _set_dims(vi, dims: tuple, name: str) -> None:
    """Set the dimensions of the graph input ``vi`` to ``dims`` (checked: same rank, static
    dimensions unchanged, every one positive)."""
    dim = vi.type.tensor_type.shape.dim
    have = _dims_text(vi)
    if vi.type.tensor_type.HasField("shape") and len(dim) != len(dims):
        raise ModelError(f"{name}: input {vi.name!r} has rank {len(dim)} ({have}); "
                         f"{list(dims)} has rank {len(dims)}")
    for axis, (d, value) in enumerate(zip(dim, dims)):
        if d.HasField("dim_value") and d.dim_value != value:
            raise ModelError(f"{name}: input {vi.name!r} is {have}, and its axis {axis} is "
                             f"{d.dim_value}, not {value}: only dynamic dimensions can be set")
    if any(v < 1 for v in dims):
        raise ModelError(f"{name}: input {vi.name!r}: {list(dims)} has a dimension below 1")
    shape = vi.type.tensor_type.shape
    del shape.dim[:]
    for value in dims:
        shape.dim.add().dim_value = value


def _dims_text(vi) -> str:
    """An ONNX input's shape in words: ``[batch, 3, 224, 224]``."""
    tensor = vi.type.tensor_type
    if not tensor.HasField("shape"):
        return "no shape"
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                           for d in tensor.shape.dim) + "]"


def _listed(inputs: dict) -> str:
    return ", ".join(f"{n!r} {_dims_text(vi)}" for n, vi in inputs.items())


def mend_onnx_model(onnx_model):
    """``onnx_model`` with what TVM 0.27's ``from_onnx`` reads wrongly mended (a copy; the model
    itself when nothing needs it); ``tvm-pet`` imports every ONNX model through it, and
    onnxruntime's reference outputs come from the model as given.

    - A ``ConstantOfShape`` of a constant empty shape (a scalar: ``torch.onnx.export`` writes one
      for transformers' BERT attention mask) becomes a ``Constant`` of that scalar. TVM
      broadcasts the one-element value to a 0-d shape and fails (``broadcast_to expects the input
      shape to have the number of ndim at least as the input tensor's``).

    >>> import onnx
    >>> from onnx import TensorProto, helper, numpy_helper
    >>> value = numpy_helper.from_array(np.array([7], np.int64))
    >>> g = helper.make_graph(
    ...     [helper.make_node("ConstantOfShape", ["empty"], ["s"], value=value)], "g", [],
    ...     [helper.make_tensor_value_info("s", TensorProto.INT64, [])],
    ...     [numpy_helper.from_array(np.zeros(0, np.int64), "empty")])
    >>> [(n.op_type, n.output[0]) for n in mend_onnx_model(helper.make_model(g)).graph.node]
    [('Constant', 's')]
    """
    from onnx import helper, numpy_helper
    graph = onnx_model.graph
    empty = {t.name for t in graph.initializer if len(t.dims) == 1 and t.dims[0] == 0}
    empty |= {n.output[0] for n in graph.node if n.op_type == "Constant"
              and any(a.name == "value" and list(a.t.dims) == [0] for a in n.attribute)}
    scalars = [k for k, n in enumerate(graph.node)
               if n.op_type == "ConstantOfShape" and n.input and n.input[0] in empty]
    if not scalars:
        return onnx_model
    mended = type(onnx_model)()
    mended.CopyFrom(onnx_model)
    for k in scalars:
        node = mended.graph.node[k]
        value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"),
                     np.zeros(1, np.float32))  # ONNX's default: a float32 0
        scalar = numpy_helper.from_array(np.asarray(value.reshape(-1)[0], dtype=value.dtype))
        mended.graph.node[k].CopyFrom(helper.make_node("Constant", [], list(node.output),
                                                       name=node.name, value=scalar))
    return mended


#: Elements above which a value stays a computation: shape arithmetic is a handful of integers.
FOLD_LIMIT = 1 << 16
#: At most this many rounds of folding (each round's shape inference reaches one step further:
#: torchvision's swin_t through ``torch.onnx`` takes 16, 5 s).
FOLD_ROUNDS = 64


def fold_shape_computations(onnx_model):
    """``onnx_model`` with its integer shape arithmetic folded into ``Constant`` nodes (a copy;
    the model itself when no ``Shape`` folds), once its inputs have static shapes.

    An exporter writes the shapes of a model with dynamic axes as computations on ``Shape``
    (``Gather``, ``Concat``, ``Equal``, ``Where``, ...); with the inputs' shapes set
    (:func:`set_input_shapes`) they are constants, but TVM 0.27's ``from_onnx`` folds them only
    in part and then fails comparing the symbolic shapes left (``Expand`` on transformers'
    BERT). ``torch.onnx`` writes such arithmetic at static shapes too, for the sizes a model
    reads in ``forward``: torchvision's shufflenet_v2 splits its channels with ``chunk``, a
    ``Slice`` whose ends TVM imports as a computation, of unknown shape.

    A node folds when it is a ``Shape`` or ``Size`` of a tensor whose shape ONNX's shape
    inference makes static, or when every input is such an integer constant (and it makes
    integers or booleans of at most :data:`FOLD_LIMIT` elements): it runs in ONNX's reference
    evaluator. Float computation is left to TVM. Shape inference runs again on what is folded,
    until nothing more folds (it infers more once the shapes it read are constants).
    """
    if not any(n.op_type in ("Shape", "Size") for n in onnx_model.graph.node):
        return onnx_model
    for _ in range(FOLD_ROUNDS):
        folded = _fold_once(onnx_model)
        if folded is onnx_model:
            return onnx_model
        onnx_model = folded
    return onnx_model


def _fold_once(onnx_model):
    """One round of :func:`fold_shape_computations`: the model itself when no ``Shape``
    folds."""
    import onnx
    from onnx import helper, numpy_helper
    try:
        inferred = onnx.shape_inference.infer_shapes(onnx_model, data_prop=True)
    except Exception:  # onnx's own error types: TVM's frontend says what is wrong
        return onnx_model
    static = {t.name: tuple(t.dims) for t in onnx_model.graph.initializer}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        tensor = vi.type.tensor_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            static[vi.name] = tuple(d.dim_value for d in tensor.shape.dim)
    known = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer
             if np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).kind in "iub"
             and np.prod(t.dims, dtype=np.int64) <= FOLD_LIMIT}
    opsets = {o.domain: o.version for o in onnx_model.opset_import}
    folded, shapes = {}, 0
    for k, node in enumerate(onnx_model.graph.node):
        values = _fold(node, known, static, opsets)
        if values is None:
            continue
        known.update((o, v) for o, v in zip(node.output, values) if o)
        if node.op_type != "Constant":
            folded[k], shapes = values, shapes + (node.op_type in ("Shape", "Size"))
    if not shapes:
        return onnx_model
    nodes = []
    for k, node in enumerate(onnx_model.graph.node):
        if k not in folded:
            nodes.append(node)
            continue
        nodes.extend(helper.make_node("Constant", [], [o], name=f"{node.name or o}_folded",
                                      value=numpy_helper.from_array(np.asarray(v)))
                     for o, v in zip(node.output, folded[k]) if o)
    mended = type(onnx_model)()
    mended.CopyFrom(onnx_model)
    del mended.graph.node[:]
    mended.graph.node.extend(nodes)
    return mended


def _fold(node, known: dict, static: dict, opsets: dict) -> list | None:
    """The values of ``node``'s outputs when :func:`fold_shape_computations` folds it, else
    None."""
    from onnx import AttributeProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from tvm_pet.onnx.importer import RANDOM_OPS, shape_node_value
    if node.domain not in ("", "ai.onnx") or node.op_type in RANDOM_OPS or any(
            a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Constant":
        value = numpy_helper.to_array(attrs["value"]) if "value" in attrs else None
        small = value is not None and value.dtype.kind in "iub" and value.size <= FOLD_LIMIT
        return [value] if small else None
    if node.op_type in ("Shape", "Size") and node.input[0] in static:
        return [np.asarray(shape_node_value(node.op_type, static[node.input[0]], attrs))]
    present = [i for i in node.input if i]
    if not present or not all(i in known for i in present):
        return None
    try:
        values = ReferenceEvaluator(node, opsets=opsets).run(
            None, {i: known[i] for i in present})
    except Exception:  # the reference evaluator's many kinds: left to TVM
        return None
    values = [np.asarray(v) for v in values]
    if all(v.dtype.kind in "iub" and v.size <= FOLD_LIMIT for v in values):
        return values
    return None


#: Operators whose output's size depends on the values of their inputs, not on their shapes.
VALUE_SIZED = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression"})
#: The inputs that set an operator's output shape (by position, what each holds): a static
#: output shape needs each to be a constant.
SHAPE_INPUTS = {
    "Reshape": {1: "new shape"}, "Expand": {1: "shape"}, "Tile": {1: "repeats"},
    "ConstantOfShape": {0: "shape"}, "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
    "Range": {0: "start", 1: "limit", 2: "delta"}, "Resize": {2: "scales", 3: "sizes"},
    "Upsample": {1: "scales"}, "Pad": {1: "pads", 3: "axes"}, "OneHot": {1: "depth"},
    "TopK": {1: "k"}, "Squeeze": {1: "axes"}, "Unsqueeze": {1: "axes"}, "Split": {1: "split"},
    "CenterCropPad": {1: "shape"},
    **{op: {1: "axes"} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                  "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                  "ReduceLogSumExp", "ReduceSumSquare")}}


def dynamic_shape_cause(onnx_model) -> str | None:
    """Why ``onnx_model`` (its inputs' shapes static) has a tensor whose shape no folding makes
    static, and what to try, in one line; None when there is no such tensor.

    After :func:`fold_shape_computations`, the first operator, in graph order, that makes a
    tensor sized by values (:data:`VALUE_SIZED`: ``NonZero``, ...), or whose shape-giving input
    (:data:`SHAPE_INPUTS`: a ``Reshape``'s new shape, a ``Slice``'s starts, ...) is still not a
    constant. For the latter, the value is traced back to where it comes from: a graph input, a
    float tensor's values, a value-sized operator, or the shape of a tensor that ONNX's shape
    inference leaves unknown.

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> g = helper.make_graph(
    ...     [helper.make_node("Reshape", ["x", "s"], ["y"], name="flat")], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
    ...      helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    >>> print(dynamic_shape_cause(helper.make_model(g)))  # doctest: +ELLIPSIS
    Reshape node 'flat' takes its new shape from graph input 's', a value given when the model...
    """
    import onnx
    folded = fold_shape_computations(onnx_model)
    graph = folded.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(folded, data_prop=True).graph
    except Exception:  # onnx's own error types: the graph as it is, without inferred types
        inferred = graph
    consts = {t.name for t in graph.initializer}
    consts |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    inputs = {vi.name for vi in graph.input} - consts
    producers = {o: n for n in graph.node for o in n.output if o}
    static, dtypes = set(consts), {}
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        tensor = vi.type.tensor_type
        dtypes[vi.name] = tensor.elem_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            static.add(vi.name)
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in VALUE_SIZED:
            return (f"{_node_text(node)} makes a tensor whose size depends on its input's "
                    f"values, known only at run time; {_STATIC_ONLY}: {_cut(node)}")
        for index, role in SHAPE_INPUTS.get(node.op_type, {}).items():
            if index < len(node.input) and node.input[index] \
                    and node.input[index] not in consts:
                origin, advice = _origin(node, node.input[index], producers, consts, inputs,
                                         static, dtypes)
                return (f"{_node_text(node)} takes its {role} from {origin}, so its output's "
                        f"shape is known only at run time; {_STATIC_ONLY}: {advice}")
    return None


_STATIC_ONLY = "tvm-pet compiles tensors of static shapes only"


def _node_text(node) -> str:
    """A node in words: ``Reshape node '/Reshape'`` (its first output when it has no name)."""
    return f"{node.op_type} node {node.name or node.output[0]!r}"


def _cut(node) -> str:
    return (f"export the model so that its shapes do not depend on tensor values, or cut the "
            f"graph before {node.name or node.output[0]!r} (onnx.utils.extract_model)")


def _origin(node, tensor: str, producers: dict, consts: set, inputs: set, static: set,
            dtypes: dict) -> tuple[str, str]:
    """Where the non-constant value ``tensor`` that ``node`` reads comes from, in words, and
    what to try: the nearest graph input, float tensor, value-sized operator or shape left
    unknown, going back through the integer computation that makes it."""
    from onnx import TensorProto
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
    todo, seen = [tensor], set()
    while todo:
        name = todo.pop(0)
        if not name or name in seen or name in consts:
            continue
        seen.add(name)
        if name in inputs:
            return (f"graph input {name!r}, a value given when the model runs",
                    f"make {name!r} a constant of the model (an initializer), or export it "
                    f"with that value fixed")
        if dtypes.get(name) in floats:
            return (f"the values of {name!r}, a float tensor", _cut(node))
        source = producers.get(name)
        if source is None:
            continue
        if source.op_type in VALUE_SIZED:
            return (f"the output of {_node_text(source)}, whose size depends on values",
                    _cut(source))
        if source.op_type in ("Shape", "Size"):
            if source.input[0] not in static:
                return (f"the shape of {source.input[0]!r}, which ONNX's shape inference "
                        f"leaves unknown", "export the model with that shape written as "
                        f"constants (a fixed input shape, no shapes read from tensors)")
            continue
        todo.extend(source.input)
    return (f"{tensor!r}, computed at run time", _cut(node))
