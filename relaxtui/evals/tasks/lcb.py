"""LiveCodeBench code_generation_lite, release v6 (175 problems), pass@1 on public + private tests.

Prompt: LiveCodeBench's own chat template (stdin programs, or LeetCode-style starter code). The program is
read the way the paper's reproduction reads it (``extract_lcb_code``; evals/DATA_CARD.md, "Parsing
conventions"); every test runs in the sandbox (6 s each). Private tests may be stored as
base64(zlib(pickle(json))): ``lcb_data`` decodes them as LiveCodeBench does, but admitting plain values only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.evals.sandbox import run_python
from relaxtui.evals.tasks.base import (
    Located,
    Sample,
    Score,
    field_label,
    field_optional_str,
    field_str,
    numbered,
    read_rows,
    require,
    strip_think,
)
from relaxtui.evals.tasks.code import CodeTask, same_output
from relaxtui.evals.tasks.hub import load_hub_rows
from relaxtui.evals.tasks.lcb_data import decode_metadata, decode_tests
from relaxtui.text import Message

SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
          "generate a correct Python program that matches the specification and passes all tests.")
FORMAT_STARTER = ("### Format: You will use the following starter code to write the solution to the problem and "
                  "enclose your code within delimiters.\n```python\n{starter}\n```\n\n")
FORMAT_STDIN = ("### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
                "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that "
                "when the python program runs, it reads the inputs, runs the algorithm and writes output to "
                "STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n")
ANSWER = "### Answer: (use the provided format with backticks)\n\n"
COLUMNS = ("question_id", "question_content", "starter_code", "public_test_cases", "private_test_cases")

FUNCTIONAL_HARNESS = """
{code}

import json as _json
_args = [_json.loads(_line) for _line in {arguments!r}.split("\\n") if _line.strip()]
_target = Solution().{name} if "Solution" in globals() else globals()["{name}"]
print(_json.dumps(_target(*_args)))
"""


def extract_lcb_code(text: str) -> str | None:
    """The program in a reply, read as LiveCodeBench does and the paper's reproduction applies it.

    graphcore-research/relaxed-spec-dec-repro, ``src/ens_spec_dec/tasks/_code.py`` (after LiveCodeBench's
    ``lcb_runner/utils/extraction_utils.py``): after ``strip_think``, split on newlines only, take every line
    that *contains* ``` anywhere as a fence (a fence inside a string literal counts too), and keep the lines
    between the last two fences, stripped of surrounding whitespace. Fewer than two fences, or nothing between
    the last two, is None here where the reproduction runs an empty program: either way no test passes.
    """
    lines = strip_think(text).split("\n")
    fences = [number for number, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return None
    code = "\n".join(lines[fences[-2] + 1:fences[-1]]).strip()
    return code or None


def rows_to_samples(rows: list[dict[str, Any]], where: str) -> list[Sample]:
    """Samples from rows in memory, named ``where row N`` in errors."""
    return located_to_samples(numbered(rows, where))


def located_to_samples(rows: list[Located]) -> list[Sample]:
    samples = []
    for where, row in rows:
        require(row, COLUMNS, where)
        starter = field_optional_str(row, "starter_code", where)
        prompt = f"### Question:\n{field_str(row, 'question_content', where)}\n\n"
        prompt += FORMAT_STARTER.format(starter=starter) if starter else FORMAT_STDIN
        prompt += ANSWER
        metadata = decode_metadata(row.get("metadata"), f"{where}: field 'metadata'")
        tests = [test for key in ("public_test_cases", "private_test_cases")
                 for test in decode_tests(row[key], f"{where}: field {key!r}")]
        messages = (Message("system", SYSTEM), Message("user", prompt))
        samples.append(Sample(field_label(row, "question_id", where), messages, gold=None,
                              meta={"tests": tests, "func_name": metadata.get("func_name")}))
    return samples


def run_test(code: str, test: dict[str, Any], func_name: str | None, timeout_s: float) -> tuple[bool, str]:
    if test.get("testtype") == "functional":
        if not func_name:
            return False, "functional test without a function name"
        result = run_python(FUNCTIONAL_HARNESS.format(code=code, arguments=test["input"], name=func_name),
                            timeout_s=timeout_s)
        if not result.ok:
            return False, "timeout" if result.timed_out else "error"
        try:
            return json.loads(result.stdout.strip().splitlines()[-1]) == json.loads(test["output"]), "wrong answer"
        except (ValueError, IndexError, RecursionError):  # the program's output is as hostile as the data
            return False, "unparsable output"
    result = run_python(code, stdin=test["input"], timeout_s=timeout_s)
    if not result.ok:
        return False, "timeout" if result.timed_out else "error"
    return same_output(result.stdout, test["output"]), "wrong answer"


class LiveCodeBench(CodeTask):
    name: ClassVar[str] = "lcb"
    version: ClassVar[int] = 3  # 2: code read as the reproduction reads it; 3: v6 = the 175 new problems only
    description: ClassVar[str] = "LiveCodeBench code_generation_lite v6, 175 problems (pass@1, sandboxed)"

    def load(self, data: Path | None = None) -> list[Sample]:
        if data is not None:
            return located_to_samples(read_rows(data))
        return located_to_samples(load_hub_rows("livecodebench/code_generation_lite", split="test", version_tag="v6",
                                                trust_remote_code=True))

    def parse(self, text: str) -> str | None:
        return extract_lcb_code(text)

    def run_tests(self, code: str, sample: Sample) -> Score:
        for number, test in enumerate(sample.meta["tests"], start=1):
            passed, why = run_test(code, test, sample.meta["func_name"], self.timeout_s)
            if not passed:
                return Score(code, False, f"test {number}: {why}")
        return Score(code, True)
