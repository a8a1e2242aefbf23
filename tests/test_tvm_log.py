"""TVM's repeated warnings on stderr shown once (tvm_pet.tvm_log), the way the console script
runs: in a process of its own, with the warnings written from C++'s file descriptor and from
child processes that inherit it."""
import subprocess
import sys
import textwrap

WARNING = ("[15:16:49] /project/include/tvm/topi/transform.h:1261: Warning: Fast mode "
           "segfaults when there are out-of-bounds indices. Make sure input indices are in bound")

SCRIPT = textwrap.dedent(f"""
    import os, subprocess, sys
    from tvm_pet.tvm_log import tvm_warnings_once
    warning = {WARNING!r}
    with tvm_warnings_once():
        for stamp in ("15:16:49", "15:16:50", "15:16:51"):  # as TVM's C++ writes it
            os.write(2, (warning.replace("15:16:49", stamp) + "\\n").encode())
        subprocess.run([sys.executable, "-c",  # a popen worker that inherited stderr
                        "import os; os.write(2, " + repr((warning + "\\n").encode()) + ")"],
                       check=True)
        print("tvm-pet: a progress line", file=sys.stderr)
        os.write(2, b"[15:16:52] /tvm/src/other.cc:7: Warning: another one\\n")
        print("isatty", sys.stderr.isatty())
    print("after", file=sys.stderr)
""")


def test_repeated_tvm_warnings_are_shown_once_and_counted():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines.count(WARNING) == 1
    assert sum("Fast mode segfaults" in line for line in lines) == 1
    assert "tvm-pet: a progress line" in lines
    assert "[15:16:52] /tvm/src/other.cc:7: Warning: another one" in lines
    assert "after" in lines
    assert ("tvm-pet: TVM repeated its warnings above 3 times more (each is shown once)"
            in lines)
    assert lines.index(WARNING) < lines.index("tvm-pet: a progress line")
    # a pipe behind the filter is no terminal, and sys.stderr still says so
    assert done.stdout.strip() == "isatty False"


def test_nothing_left_out_adds_no_line():
    script = ("import os\nfrom tvm_pet.tvm_log import tvm_warnings_once\n"
              "with tvm_warnings_once():\n    os.write(2, b'plain\\n')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "plain\n"


def test_a_left_out_warning_leaves_out_its_indented_lines_too():
    # a warning whose text continues on indented lines, once per kernel
    import io

    from tvm_pet.tvm_log import filter_lines
    head = ('[05:39:{:02d}] /project/src/relax/transform/legalize_ops.cc:77: Warning: no '
            'legalization of "{}"; tried:\n')
    lines = []
    for second, kind in enumerate(("max", "avg", "avg", "max", "avg")):
        lines += [head.format(second, kind), f"  relax.op.{kind}\n"]
    lines += ["tvm-pet: tuning 0 trials\n", "  an indented line of the run's own\n"]
    out = io.BytesIO()
    assert filter_lines(io.BytesIO("".join(lines).encode()), out) == 3
    shown = out.getvalue().decode().splitlines()
    assert shown[:4] == [lines[0].rstrip("\n"), lines[1].rstrip("\n"),
                         lines[2].rstrip("\n"), lines[3].rstrip("\n")]
    assert shown[4:] == ["tvm-pet: tuning 0 trials", "  an indented line of the run's own",
                         "tvm-pet: TVM repeated its warnings above 3 times more (each is shown "
                         "once)"]


def test_tvm_s_note_that_pooling_has_no_custom_schedule_rule_is_left_out_and_counted():
    import io
    from tvm_pet.tvm_log import filter_lines
    pool = ('[12:52:14] /project/src/s_tir/meta_schedule/schedule_rule/apply_custom_rule.cc:64: '
            'Warning: Unknown schedule rule "meta_schedule.pool_max" for target keys '
            '"("cpu",)". Checked ffi::Functions:\n'
            '  s_tir.meta_schedule.cpu.meta_schedule.pool_max\n')
    out = io.BytesIO()
    assert filter_lines(io.BytesIO((pool + "tvm-pet: tuning task 2/9\n" + pool).encode()),
                        out) == 2
    assert out.getvalue().decode().splitlines() == [
        "tvm-pet: tuning task 2/9",
        "tvm-pet: left out 2 TVM warnings that a pooling kernel has no custom schedule rule "
        "(its default rules schedule it)"]
