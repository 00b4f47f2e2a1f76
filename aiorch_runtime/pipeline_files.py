"""Pipeline files: reading one (YAML, with the line and column of every value), checking it,
and the folder a worker serves them from (``PIPELINES_DIR``).

A problem is reported as ``FILE:LINE:COLUMN: RULE: what is wrong`` (``FileProblem``): the
spec's models, the step types' settings and the compiler's checks each name a path into the
file's data, which the marks kept while reading turn into a line and column; a template's
problem names its line within the template, and a multi-line template's lines are counted from
where its text starts.

The folder holds one pipeline per ``*.yaml`` / ``*.yml`` file at its top level (a file's
``name``, not its file name, is the pipeline's). It is read again whenever a file in it
changes, so a changed file's new version is what the next run starts with; runs that started
earlier keep theirs (``workflows.data.source``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from aiorch_runtime.errors import ConfigError
from aiorch_runtime.pipeline_places import FileProblem, file_problem
from aiorch_runtime.pipeline_yaml import Reader, ReadRefused
from workflows.data.catalog import Catalog
from workflows.data.compiler import CheckProblem, check, error_message
from workflows.data.contract import MAX_FILE_BYTES, Rule
from workflows.data.spec import PipelineRecord, PipelineSpec, file_digest
from workflows.payloads import printable

SUFFIXES = (".yaml", ".yml")
# How long a run's start waits for the folder: every file's read is bounded, so only a stalled
# file system takes this long.
READ_TIMEOUT = dt.timedelta(seconds=5)


@dataclass(frozen=True)
class CheckedFile:
    """A pipeline file as read: its record when it has no problem, else its problems."""

    path: Path
    record: PipelineRecord | None
    problems: tuple[FileProblem, ...] = ()


class PipelineFilesInvalid(ConfigError):
    """Pipeline files with problems: the message names the first few, one line."""

    def __init__(
        self, problems: list[FileProblem], what: str = "pipeline files are invalid"
    ) -> None:
        self.problems = problems
        shown = "; ".join(str(problem) for problem in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(f"{what}: {shown}{more}; check them with `aiorch pipeline check FILE`")


def check_text(
    text: str, name: str, catalog: Catalog, reserved: Collection[str] = ()
) -> tuple[PipelineRecord | None, list[FileProblem]]:
    """The record of pipeline file text ``text`` (reported as ``name``), or its problems.
    ``reserved``: pipeline names already taken (the worker's pipelines written in Python)."""
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        return None, [
            FileProblem(
                name,
                1,
                1,
                str(Rule.FILE_TOO_LARGE),
                f"a pipeline file holds at most {MAX_FILE_BYTES} bytes",
            )
        ]
    reader = Reader(text)
    try:
        data = reader.read()
    except ReadRefused as err:
        line, column = _line_column(err.problem_mark)
        return None, [FileProblem(name, line, column, str(err.rule), str(err.problem))]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line, column = _line_column(mark)
        reason = getattr(err, "problem", None) or str(err)
        return None, [FileProblem(name, line, column, str(Rule.YAML), f"not YAML: {reason}")]
    marks = reader.marks
    problems = [
        file_problem(name, text, marks, CheckProblem(path, rule, message))
        for path, rule, message in reader.problems
    ]
    if not isinstance(data, dict):
        problems.append(
            FileProblem(
                name,
                1,
                1,
                str(Rule.INVALID_VALUE),
                "a pipeline file is a mapping (name:, version:, steps:, ...)",
            )
        )
        return None, problems
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as err:
        for item in err.errors(include_url=False, include_input=False):
            rule = {"extra_forbidden": Rule.UNKNOWN_FIELD, "missing": Rule.MISSING_FIELD}.get(
                item["type"], Rule.INVALID_VALUE
            )
            owner = "a step" if item["loc"][:1] == ("steps",) else "a pipeline file"
            found = CheckProblem(tuple(item["loc"]), rule, error_message(item, owner))
            problems.append(file_problem(name, text, marks, found))
        return None, sorted(problems, key=_order)
    if spec.name in reserved:
        problems.append(
            file_problem(
                name,
                text,
                marks,
                CheckProblem(
                    ("name",), Rule.NAME_TAKEN, f"{spec.name!r} is a pipeline written in Python"
                ),
            )
        )
    problems += [file_problem(name, text, marks, problem) for problem in check(spec, catalog)]
    if problems:
        return None, sorted(problems, key=_order)
    record = PipelineRecord(
        name=spec.name, version=spec.version, sha256=file_digest(text), text=text, spec=spec
    )
    return record, []


def _line_column(mark: yaml.Mark | None) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _order(problem: FileProblem) -> tuple[int, int]:
    return (problem.line, problem.column)


def read_file(path: Path, catalog: Catalog, reserved: Collection[str] = ()) -> CheckedFile:
    """The pipeline file at ``path``, read and checked."""
    name = str(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        return CheckedFile(
            path,
            None,
            (FileProblem(name, 1, 1, str(Rule.YAML), f"cannot read it: {err.strerror or err}"),),
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return CheckedFile(path, None, (FileProblem(name, 1, 1, str(Rule.YAML), "not UTF-8 text"),))
    record, problems = check_text(text, name, catalog, reserved)
    return CheckedFile(path, record, tuple(problems))


def pipeline_paths(folder: Path) -> list[Path]:
    """The pipeline files in ``folder`` (top level, sorted)."""
    return sorted(
        path
        for path in folder.iterdir()
        if path.suffix in SUFFIXES and path.is_file() and not path.name.startswith(".")
    )


@dataclass(frozen=True)
class FolderScan:
    """A folder as read: its valid pipelines by name, and every problem."""

    records: Mapping[str, PipelineRecord]
    files: Mapping[str, Path]
    problems: tuple[FileProblem, ...]


def scan(files: Iterable[CheckedFile]) -> FolderScan:
    """The pipelines of ``files``; two files of one name are both refused."""
    records: dict[str, PipelineRecord] = {}
    paths: dict[str, Path] = {}
    problems: list[FileProblem] = []
    for checked in files:
        problems += checked.problems
        record = checked.record
        if record is None:
            continue
        if record.name in records:
            problems.append(
                FileProblem(
                    str(checked.path),
                    1,
                    1,
                    str(Rule.DUPLICATE_NAME),
                    f"{paths[record.name]} also names pipeline {record.name!r}",
                )
            )
            continue
        records[record.name] = record
        paths[record.name] = checked.path
    return FolderScan(records, paths, tuple(problems))


class PipelineFolder:
    """The worker's pipeline folder (``PIPELINES_DIR``), read again when a file in it changes.

    ``names`` and ``has`` cover every pipeline this process has served, so runs that started
    on a file since removed still pass the activity caller check. A worker reads it with
    `current` (in a thread, with a time limit); ``scan`` and ``check`` read it in the caller's
    thread (the operator's tools, a worker's start).
    """

    def __init__(self, path: Path, catalog: Catalog, reserved: Collection[str] = ()) -> None:
        self.path = path
        self._catalog = catalog
        self._reserved = frozenset(reserved)
        self._cache: dict[Path, tuple[tuple[int, int], CheckedFile]] = {}
        self._served: set[str] = set()
        self._reading: asyncio.Future[FolderScan] | None = None

    def scan(self) -> FolderScan:
        """The folder now (files unchanged since the last scan are not read again).

        Raises:
            ConfigError: the folder cannot be listed.
        """
        try:
            paths = pipeline_paths(self.path)
        except OSError as err:
            raise ConfigError(f"PIPELINES_DIR={str(self.path)!r}: {err.strerror or err}") from None
        checked = []
        for path in paths:
            try:
                status = path.stat()
                stamp = (status.st_mtime_ns, status.st_size)
            except OSError:
                continue
            cached = self._cache.get(path)
            if cached is None or cached[0] != stamp:
                cached = (stamp, read_file(path, self._catalog, self._reserved))
                self._cache[path] = cached
            checked.append(cached[1])
        for gone in set(self._cache) - set(paths):
            del self._cache[gone]
        found = scan(checked)
        # Replaced, not updated: the event loop reads it while a thread scans.
        self._served = self._served | set(found.records)
        return found

    def check(self) -> FolderScan:
        """The folder, which must be valid (what a worker checks before it starts).

        Raises:
            PipelineFilesInvalid: a file has a problem; the message says which and where.
            ConfigError: the folder cannot be listed.
        """
        found = self.scan()
        if found.problems:
            raise PipelineFilesInvalid(
                list(found.problems), f"PIPELINES_DIR={self.path}: pipeline files are invalid"
            )
        return found

    async def current(self) -> FolderScan:
        """The folder now, read in a thread so the worker's event loop never waits on it, and
        given at most ``READ_TIMEOUT``; callers meanwhile share the read under way.

        Raises:
            ConfigError: the folder cannot be listed, or was not read in time (the read goes
                on in its thread and the next caller shares it).
        """
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(asyncio.to_thread(self.scan))
        try:
            return await asyncio.wait_for(
                asyncio.shield(self._reading), READ_TIMEOUT.total_seconds()
            )
        except TimeoutError:
            raise ConfigError(
                f"PIPELINES_DIR={str(self.path)!r} was not read within "
                f"{READ_TIMEOUT.total_seconds():g} s"
            ) from None

    async def get(self, name: str) -> PipelineRecord | None:
        """The pipeline called ``name`` as its file is now, if it has no problem. Another
        file's problem does not stop it.

        Raises:
            PipelineFilesInvalid: no valid file names it and some file has problems (it may be
                the one).
            ConfigError: as `current`.
        """
        found = await self.current()
        record = found.records.get(name)
        if record is None and found.problems:
            raise PipelineFilesInvalid(
                list(found.problems),
                f"no valid pipeline {printable(name, 64)!r}; files with problems",
            )
        return record

    async def names(self) -> list[str]:
        """The pipelines the folder has now and every one this process served.

        Raises:
            ConfigError: as `current`.
        """
        return sorted({*(await self.current()).records, *self._served})

    async def has(self, name: str) -> bool:
        """Whether ``name`` is one of `names`.

        Raises:
            ConfigError: as `current`.
        """
        return name in self._served or name in (await self.current()).records


def settings_folder(
    path: Path | None, catalog: Catalog, reserved: Collection[str]
) -> PipelineFolder | None:
    """The folder ``PIPELINES_DIR`` names, if it names one.

    Raises:
        ConfigError: it is not a folder.
    """
    if path is None:
        return None
    if not path.is_dir():
        raise ConfigError(f"PIPELINES_DIR={str(path)!r} is not a folder")
    return PipelineFolder(path, catalog, reserved)
