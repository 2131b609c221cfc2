"""Task files: a benchmark declared in TOML (``relaxtui eval my_task.toml``), for workloads no built-in task covers.

A task is flat data, as in lm-evaluation-harness and lighteval: where the rows come from (``[data]``), how a
row becomes a prompt (``[prompt]``), how a reply is judged (``[answer]``, one kind of
``relaxtui.evals.taskfiles.answers``) and an explicit ``version``. There is no code in a task file: templates are
plain field substitutions (``relaxtui.evals.taskfiles.template``) and answer kinds are a closed registry.
Everything — keys, types, the template's fields against the declared ones, a regex, every row of the data — is
checked when the file loads, so a bad file is one line and exit 2 before any model loads.

Identity: ``version`` is ``"<version>+sha:<12 hex>"``, the digest of the file's bytes and of its local data
file's bytes, so editing either one without bumping the version still never mixes results in a folder.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.answers import NO_ANSWER, Reader, make_reader
from relaxtui.evals.taskfiles.taskdata import DataSource, read_source
from relaxtui.evals.taskfiles.template import Template, field_text
from relaxtui.evals.taskfiles.tomltable import Table
from relaxtui.evals.tasks.base import Located, Sample, Score, Task, bad
from relaxtui.files import read_regular_bytes
from relaxtui.text import Message

MAX_FILE_BYTES = 1 << 20
TRIED_SHOWN = 80  # characters of the reply `tasks check` tried that its miss line shows
ANSWER_DOCS = "docs/taskfiles.md#answer"
MAX_TOKENS_LIMIT = 1 << 20
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def parse_toml(path: Path) -> tuple[dict[str, Any], bytes]:
    """The file's tables and bytes; any defect (missing, too big, not UTF-8, not TOML) is one line."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise UserError("task files need Python 3.11 (tomllib) or the tomli package") from None
    data = read_regular_bytes(path, MAX_FILE_BYTES, "task file")  # a FIFO or device: one line, never a hang
    try:
        return tomllib.loads(data.decode("utf-8")), data
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply") from None


@dataclass(frozen=True)
class Prompt:
    """How a row becomes what the verifier reads."""

    template: Template
    system: Template | None
    chat: bool  # False: the rendered template is the raw completion prompt (no chat template)
    thinking: bool | None  # None: the chat template's own default
    stop: tuple[str, ...]
    max_tokens: int

    @classmethod
    def read(cls, table: Table) -> Prompt:
        template = Template(table.text("template", required=True, empty=False), f"{table.where} template")
        system_text = table.text("system")
        system = Template(system_text, f"{table.where} system") if system_text is not None else None
        chat = table.flag("chat", True)
        if system is not None and not chat:
            raise table.error("system", "needs chat = true (a raw completion prompt has no system message)")
        thinking = table.flag("thinking", None)
        stop = table.texts("stop")
        max_tokens = table.integer("max_tokens", 1024, low=1, high=MAX_TOKENS_LIMIT)
        table.done()
        return cls(template, system, chat, thinking, stop, max_tokens)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.template.fields, *(self.system.fields if self.system else ()))))

    def messages(self, row: dict[str, Any], where: str) -> tuple[Message, ...]:
        user = Message("user", self.template.render(row, where))
        return (Message("system", self.system.render(row, where)), user) if self.system else (user,)

    def meta(self) -> dict[str, Any]:
        """What the executors need beyond the messages (it travels with each sample, to Ray actors too)."""
        meta: dict[str, Any] = {"stop": self.stop} if self.stop else {}
        if not self.chat:
            meta["raw"] = True
        if self.thinking is not None:
            meta["thinking"] = self.thinking
        return meta


class TaskFile(Task):
    """A task read from a TOML file; it behaves as a built-in task does everywhere a task is taken."""

    def __init__(self, path: Path, name: str, version: str, description: str, data: DataSource, prompt: Prompt,
                 reader: Reader, gold_field: str | None, solution_field: str | None, id_field: str | None,
                 declared: tuple[str, ...]) -> None:
        # why the type: ignore below: a task file sets per instance what a built-in task declares on its class (Task's
        # ClassVars)
        self.path, self.name, self.version, self.description = path, name, version, description  # type: ignore[misc]
        self.data, self.prompt, self.reader = data, prompt, reader
        self.gold_field, self.solution_field, self.id_field = gold_field, solution_field, id_field
        self.declared = declared
        self.max_tokens = prompt.max_tokens  # type: ignore[misc]
        self.scored, self.runs_code = reader.scored, reader.runs_code

    @property
    def used_fields(self) -> tuple[str, ...]:
        named = (*self.prompt.fields, self.id_field, self.gold_field, self.solution_field, *self.declared)
        return tuple(dict.fromkeys(name for name in named if name is not None))

    def sample(self, index: int, where: str, row: dict[str, Any]) -> Sample:
        """One row as a sample; any defect is a UserError naming the row and the field."""
        missing = [name for name in self.used_fields if name not in row]
        if missing:
            raise bad(where, f"missing field(s) {', '.join(missing)} (used by {self.path.name})")
        ident = field_text(row, self.id_field, where) if self.id_field else str(index + 1)
        gold = None
        if self.gold_field is not None:
            if row[self.gold_field] is None:
                raise bad(where, f"field {self.gold_field!r} (the gold answer) is null")
            gold = self.reader.gold(row[self.gold_field], f"{where}: field {self.gold_field!r}")
        meta = self.prompt.meta()
        if self.solution_field is not None:
            meta["solution"] = field_text(row, self.solution_field, where)
        return Sample(ident, self.prompt.messages(row, where), gold, meta)

    def rows(self, data: Path | None = None) -> list[Located]:
        return read_source(self.data if data is None else DataSource(path=data))

    def check(self, data: Path | None = None) -> tuple[list[Sample], list[str]]:
        """Every row that loads, and one line for each row that does not (``tasks check`` lists them all)."""
        samples: list[Sample] = []
        failures: list[str] = []
        seen: dict[str, str] = {}  # sample id -> where it first came
        for index, (where, row) in enumerate(self.rows(data)):
            try:
                sample = self.sample(index, where, row)
            except UserError as exc:
                failures.append(str(exc))
                continue
            if sample.id in seen:
                failures.append(f"{where}: duplicate id {sample.id!r} (first at {seen[sample.id]})")
                continue
            seen[sample.id] = where
            samples.append(sample)
        return samples, failures

    def load(self, data: Path | None = None) -> list[Sample]:
        samples, failures = self.check(data)
        if failures:
            more = f" (and {len(failures) - 1} more rows; `relaxtui tasks check {self.path}` lists them)"
            raise UserError(failures[0] + (more if len(failures) > 1 else ""))
        return samples

    def before_stop(self, text: str) -> str:
        """The reply up to the first stop string: what generation would have returned had it cut there."""
        cuts = [at for at in (text.find(stop) for stop in self.prompt.stop) if at >= 0]
        return text[:min(cuts)] if cuts else text

    def parse(self, text: str) -> Any:
        return self.reader.parse(self.reader.prepare(self.before_stop(text)))

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        return parsed is not None and self.reader.judge(parsed, gold)

    def score(self, text: str, sample: Sample) -> Score:
        """Scored by the answer kind; a reader that fails on this row records the failure and the run goes on."""
        try:
            return self.reader.score(self.before_stop(text), sample.gold)
        except Exception as exc:  # a row the reader cannot judge is a failed sample, never a stopped run
            return Score(None, False, f"failed: {type(exc).__name__}: {exc}"[:300])

    def example_reply(self, sample: Sample) -> str | None:
        """A reply that must score correct (``tasks check``): the reference solution, or the gold written out."""
        if "solution" in sample.meta:
            return f"```python\n{sample.meta['solution']}\n```"
        return self.reader.example_reply(sample.gold)

    def gold_miss(self, sample: Sample, reply: str, score: Score) -> str:
        """Why the reply ``tasks check`` tried for a row did not score correct, in one line: what the kind read
        (or that it found nothing), the reply itself (its first TRIED_SHOWN characters) and where it came from,
        with the key that fixes it — a miss is usually a reply in another format than the reader expects."""
        read = (f"read {str(score.parsed)[:60]!r}" if score.parsed is not None
                else f"found no answer ({score.detail})" if score.detail and score.detail != NO_ANSWER
                else "found no answer")
        tried = repr(reply[:TRIED_SHOWN]) + (f"… ({len(reply) - TRIED_SHOWN} more characters)"
                                             if len(reply) > TRIED_SHOWN else "")
        if "solution" in sample.meta:
            origin, fix = "the row's reference solution", "check the solution field and the tests"
        elif self.reader.example:
            origin = "[answer] example"
            fix = f"make [answer] example a reply its kind reads as {{gold}} ({ANSWER_DOCS})"
        else:
            origin = "the gold written out, as no [answer] example is set"
            fix = (f"set [answer] example to a reply in your model's format, with {{gold}} for the gold "
                   f"({ANSWER_DOCS})")
        return (f"row {sample.id!r}: its gold answer does not score correct: kind {self.reader.kind!r} {read} in "
                f"the reply tried, {tried} ({origin}); {fix}")


def read_answer(table: Table) -> tuple[Reader, str | None, str | None]:
    """The ``[answer]`` table: its reader, the row field holding the gold (or a code task's tests), and the field
    holding a reference solution, if any. A scored kind without its gold field (a code task without tests) is
    an error here."""
    reader = make_reader(table)
    gold_field = table.text(reader.gold_key) if reader.scored else None
    if gold_field is None and (reader.needs_gold or reader.runs_code):
        what = "its Python tests" if reader.runs_code else "the gold answer"
        raise table.error(reader.gold_key, f"is required for kind {reader.kind!r}: the row field holding {what}")
    solution_field = table.text(reader.solution_key) if reader.solution_key else None
    table.done()
    return reader, gold_field, solution_field


def load_task(path: Path, *, allow_outside_data: bool = False) -> TaskFile:
    """Read and check a task file (every row of its data included); one line naming the field on any defect.
    Its data path must stay in its folder unless ``allow_outside_data`` (``taskdata.inside_folder``)."""
    document, content = parse_toml(path)
    top = Table(document, str(path))
    name = top.text("name", required=True)
    if not NAME.fullmatch(name):
        raise top.error("name", f"must be letters, digits, '_', '.' or '-' (it names folders), not {name!r}")
    version = top.integer("version", None, low=0)
    if version is None:
        raise top.error("version", "is required (bump it when the data, prompt or answer reading changes)")
    description = top.text("description", "")
    tables = {key: top.sub(key) for key in ("data", "prompt", "answer")}
    top.done()
    for key, table in tables.items():
        if table is None:
            raise UserError(f"{path}: the [{key}] table is required")
    data_table, prompt_table, answer_table = tables["data"], tables["prompt"], tables["answer"]
    assert data_table is not None and prompt_table is not None and answer_table is not None
    data = DataSource.read(data_table, path.parent, allow_outside=allow_outside_data)
    id_field, declared = data_table.text("id"), data_table.texts("fields")
    data_table.done()
    prompt = Prompt.read(prompt_table)
    reader, gold_field, solution_field = read_answer(answer_table)
    if declared:
        for where, names in ((prompt_table.where, prompt.fields), (answer_table.where, (gold_field, solution_field)),
                             (data_table.where, (id_field,))):
            for field in (name for name in names if name is not None):
                if field not in declared:
                    raise UserError(f"{where} names field {field!r}, which [data] fields does not declare "
                                    f"({', '.join(declared)})")
    digest = hashlib.sha256(content)
    data.add_to(digest)
    task = TaskFile(path, name, f"{version}+sha:{digest.hexdigest()[:12]}", description, data, prompt, reader,
                    gold_field, solution_field, id_field, declared)
    return task
