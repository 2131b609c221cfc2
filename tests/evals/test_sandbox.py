"""The code sandbox: loops killed, memory bombs contained, network refused, results judged."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest

from relaxtui.evals import sandbox
from relaxtui.evals.sandbox import _run as sandbox_run
from relaxtui.evals.sandbox import run_python
from relaxtui.evals.sandbox._program import PROGRAM_PYTHON
from relaxtui.evals.tasks.base import Sample
from relaxtui.evals.tasks.humaneval import HumanEval
from relaxtui.evals.tasks.lcb import LiveCodeBench


def test_normal_program_runs_with_stdin():
    result = run_python("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="2 3 4")
    assert result.ok and result.stdout.strip() == "9"


def test_an_ordinary_program_reads_stdin_and_writes_its_own_dir():
    code = ("import collections, json, math, sys\nwords = sys.stdin.read().split()\n"
            "with open('counts.json', 'w') as handle:\n    json.dump(collections.Counter(words), handle)\n"
            "print(json.load(open('counts.json'))['a'], math.isqrt(49))")
    result = run_python(code, stdin="a b a")
    assert result.ok and result.stdout.split() == ["2", "7"], result.stderr


IMPORTS = """
import importlib, json
found = []
for name in ("ctypes", "decimal", "hashlib", "sqlite3", "ssl", "zlib", "bz2", "lzma", "zoneinfo", "datetime",
             "multiprocessing", "uuid", "array", "heapq", "bisect", "fractions", "statistics"):
    try:
        importlib.import_module(name)
        found.append(name)
    except Exception:
        pass
print(json.dumps(found))
"""


def test_the_private_root_holds_every_library_the_interpreter_loads():
    host = subprocess.run([PROGRAM_PYTHON, "-I", "-c", IMPORTS], capture_output=True, text=True, check=True)
    result = run_python(IMPORTS)
    assert result.ok and json.loads(result.stdout) == json.loads(host.stdout), result.stderr


def test_infinite_loop_is_killed_with_its_children():
    started = time.perf_counter()
    code = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'])\nwhile True: pass"
    result = run_python(code, timeout_s=1.0)
    assert result.timed_out and not result.ok and result.killed_for == "timeout"
    assert time.perf_counter() - started < 1.0 + 10  # generous: a loaded machine must not fail this
    assert result.leftover_processes == 0


def test_memory_bomb_is_contained():
    result = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(50_000_000))", memory_mb=256,
                        timeout_s=10)
    assert not result.ok and not result.timed_out
    assert "MemoryError" in result.stderr


@pytest.mark.parametrize("namespace", [True, False], ids=["netns-if-available", "guard-only"])
def test_network_is_refused(namespace, monkeypatch):
    if not namespace:
        plan = sandbox_run.current_plan().without_namespaces()
        monkeypatch.setattr(sandbox_run, "current_plan", lambda: plan)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\nprint('connected')"
    result = sandbox.run_python(code, timeout_s=4)
    server.setblocking(False)  # a connection that got through would wait in the backlog: accept finds it
    try:
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    assert not result.ok and "connected" not in result.stdout


def test_runs_in_its_own_temporary_directory(tmp_path):
    result = run_python("import os\nopen('scratch.txt', 'w').write('x')\nprint(os.getcwd())")
    assert result.ok and "relaxtui-sandbox-" in result.stdout
    assert not (tmp_path / "scratch.txt").exists()


def test_large_stdin_reaches_a_program_that_reads_it_and_not_one_that_does_not():
    data = "7\n" * 300_000  # far more than a pipe buffer
    result = run_python("import sys\nprint(len(sys.stdin.read().split()))", stdin=data)
    assert result.ok and result.stdout.strip() == "300000"
    result = run_python("print('ignored stdin')", stdin=data)
    assert result.ok and result.stdout.strip() == "ignored stdin"


def test_output_beyond_the_cap_is_counted_and_dropped():
    result = run_python("import sys\nfor _ in range(48):\n    sys.stdout.write('y' * 65536)")
    assert result.ok and result.truncated
    assert len(result.stdout) == sandbox.MAX_OUTPUT_BYTES and result.stdout_bytes == 48 * 65536


def test_exit_code_and_signal_are_reported():
    assert run_python("raise SystemExit(3)").returncode == 3
    result = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert result.returncode == -9 and not result.ok and not result.timed_out


def test_humaneval_scores_a_correct_and_a_wrong_completion():
    task = HumanEval()
    sample = next(s for s in task.load() if s.id == "HumanEval/0")
    good = ("```python\ndef has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold "
            "for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```")
    bad = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    assert task.score(good, sample).correct
    assert not task.score(bad, sample).correct
    assert task.score("I don't know", sample).detail == "no code block"


@pytest.mark.parametrize("escape", ["import os\nos._exit(0)", "import sys\nsys.exit(0)",
                                    "import atexit, os\natexit.register(os._exit, 0)\nraise SystemExit(1)"])
def test_a_wrong_completion_that_exits_0_before_the_tests_is_scored_wrong(escape):
    """Exit code 0 is the program's to choose; correct means the tests ran to their end (the sandbox's nonce)."""
    task = HumanEval()
    sample = next(s for s in task.load() if s.id == "HumanEval/0")
    wrong = f"```python\n{escape}\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    score = task.score(wrong, sample)
    assert not score.correct and score.detail == "stopped before its tests ran to the end", score


def test_lcb_stdin_and_functional_tests():
    task = LiveCodeBench(timeout_s=3)
    stdin_sample = Sample("s", (), None, {"func_name": None, "tests": [
        {"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"},
        {"input": "2\n5 5\n", "output": "10\n", "testtype": "stdin"}]})
    solution = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"
    assert task.score(solution, stdin_sample).correct
    assert not task.score("```python\nprint(6)\n```", stdin_sample).correct
    functional = Sample("f", (), None, {"func_name": "twoSum", "tests": [
        {"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"}]})
    code = ("```python\nclass Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
            "        for i, n in enumerate(nums):\n            if target - n in seen:\n"
            "                return [seen[target - n], i]\n            seen[n] = i\n```")
    assert task.score(code, functional).correct
    looping = "```python\nwhile True:\n    pass\n```"
    assert task.score(looping, stdin_sample).detail == "test 1: timeout"
