"""`tvm-pet verify` and `tvm-pet example`: the JSON contract, exit codes, and clear errors."""
import json

import numpy as np
import pytest

from tvm_pet import example_pairs
from tvm_pet.cli import main
from tvm_pet.ir import ProgramBuilder
from tvm_pet.onnx import import_model, save_model
from tvm_pet.testing.bruteforce import differing_masks


def _write_pair(tmp_path, pair):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    save_model(pair[0], a)
    save_model(pair[1], b)
    return str(a), str(b)


def _run_json(capsys, *argv):
    assert main(["verify", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_verify_json_contract_and_soundness(tmp_path, capsys):
    pair = example_pairs.figure1_pair()
    a, b = _write_pair(tmp_path, pair)
    out = _run_json(capsys, a, b, "--tests", "3", "--seed", "7")
    assert {"equivalent", "prime", "tests", "error_bound", "outputs"} <= set(out)
    assert out["prime"] == 2**31 - 1 and out["tests"] == 3 and out["equivalent"] is False
    assert 0 < out["error_bound"] < 1e-20
    (o,) = out["outputs"]
    assert o["name"] == "y" and o["shape"] == [2, 4, 8, 8] and o["equivalent"] is False
    # the reported boxes (read without their steps, as bounding boxes) cover every difference
    mask = differing_masks(import_model(a), import_model(b))["y"]
    covered = np.zeros_like(mask)
    for box in o["differing_boxes"]:
        covered[tuple(slice(lo, hi) for lo, hi in zip(box["lo"], box["hi"]))] = True
    assert mask.any() and not (mask & ~covered).any()


def test_verify_equivalent_pair_exits_zero(tmp_path, capsys):
    a, b = _write_pair(tmp_path, example_pairs.figure3_pair(exact=True))
    out = _run_json(capsys, a, b)
    assert out["equivalent"] is True and out["outputs"][0]["differing_boxes"] == []


def test_verify_human_output(tmp_path, capsys):
    a, b = _write_pair(tmp_path, example_pairs.off_by_one_slice_pair())
    assert main(["verify", a, b]) == 0
    text = capsys.readouterr().out
    assert "NOT equivalent" in text and "differs in" in text


def test_mismatched_models_exit_two(tmp_path, capsys):
    a = tmp_path / "two.onnx"
    c = tmp_path / "four.onnx"
    save_model(example_pairs.figure1_pair(batch=2)[0], a)
    save_model(example_pairs.figure1_pair(batch=4)[1], c)
    assert main(["verify", str(a), str(c)]) == 2
    assert "differ" in capsys.readouterr().err


def test_corrupt_and_missing_files_exit_two(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 not a model")
    a, _ = _write_pair(tmp_path, example_pairs.figure1_pair())
    assert main(["verify", str(bad), a]) == 2
    assert main(["verify", str(tmp_path / "missing.onnx"), a]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_non_linear_model_is_refused_by_name(tmp_path, capsys):
    b = ProgramBuilder()
    x = b.input("x", (1, 4))
    (y,) = b.opaque("Relu", [x])
    p = b.build([y])
    path = tmp_path / "relu.onnx"
    save_model(p, path)
    assert main(["verify", str(path), str(path)]) == 2
    assert "Relu" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["figure1", "figure3", "wrong-padding"])
def test_example_writes_a_verifiable_pair(tmp_path, capsys, name):
    assert main(["example", name, str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out
    out = _run_json(capsys, str(tmp_path / "original.onnx"), str(tmp_path / "candidate.onnx"))
    assert out["equivalent"] is (name == "figure3")


@pytest.mark.parametrize("command, kept", [("verify", False), ("tune", True)])
def test_ctrl_c_is_a_line_and_exit_130_not_a_traceback(tmp_path, capsys, monkeypatch, command,
                                                        kept):
    from tvm_pet.cli import commands

    def interrupted(_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "_cmd_verify", interrupted)
    monkeypatch.setattr(commands, "_cmd_tune", interrupted)
    model = str(tmp_path / "m.onnx")
    argv = ["verify", model, model] if command == "verify" else ["tune", model]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.startswith(f"tvm-pet {command}: interrupted") and "Traceback" not in err
    assert ("records measured so far are kept" in err) == kept


def test_the_time_limit_defaults_grow_with_a_budget_in_minutes():
    from tvm_pet.cli import BUDGET_TIME_LIMIT_PER_MINUTE, _default_time_limit, build_parser

    def limit(*words):
        args = build_parser().parse_args(list(words))
        _default_time_limit(args)
        return args.time_limit

    assert limit("optimize", "m.onnx", "--out", "o") == 240.0
    assert limit("tune", "m.onnx") == 600.0
    # swin_t with --budget 30m: 240 s had left the timing nothing; 900 s timed 3 candidates
    assert limit("optimize", "m.onnx", "--out", "o", "--budget", "30m") == \
        30 * BUDGET_TIME_LIMIT_PER_MINUTE == 900.0
    assert limit("optimize", "m.onnx", "--out", "o", "--budget", "5m") == 240.0  # the larger
    assert limit("optimize", "m.onnx", "--out", "o", "--budget", "2000") == 240.0  # trials
    assert limit("optimize", "m.onnx", "--out", "o", "--budget", "30m",
                 "--time-limit", "100") == 100.0  # as given
    assert limit("tune", "m.onnx", "--budget", "60m") == 1800.0
