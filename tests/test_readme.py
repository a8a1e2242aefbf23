"""The README's Python examples run, and .ci/run runs exactly the README's test command."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(?:#[^\n]*\n)?(.*?)\n```", README, re.S)
    assert len(commands) >= 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1].strip() in ci


def test_the_readme_test_command_runs_the_package_doctests():
    commands = re.findall(r"```bash\n(?:#[^\n]*\n)?(.*?)\n```", README, re.S)
    args = commands[1].split()
    assert "--doctest-modules" in args and "tvm_pet" in args[args.index("--doctest-modules"):]
