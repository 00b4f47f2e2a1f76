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

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from aiorch.runtime.errors import ConfigError
from aiorch.runtime.pipeline_places import FileProblem, Loc, Marks, file_problem
from workflows.data.catalog import Catalog
from workflows.data.compiler import CheckProblem, check, error_message
from workflows.data.contract import MAX_FILE_BYTES, Rule
from workflows.data.spec import PipelineRecord, PipelineSpec, file_digest
from workflows.payloads import printable

SUFFIXES = (".yaml", ".yml")


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


class _Reader:
    """YAML into plain data, keeping marks and refusing duplicate keys and non-JSON values;
    keys are taken as written (``on:`` is the key "on", not YAML 1.1's true)."""

    def __init__(self, text: str) -> None:
        self.loader = yaml.SafeLoader(text)
        self.marks = Marks()
        self.problems: list[tuple[Loc, Rule, str]] = []

    def read(self) -> Any:
        try:
            node = self.loader.get_single_node()
            if node is None:
                return None
            return self._data(node, ())
        finally:
            self.loader.dispose()

    def _mark(self, path: Loc, node: yaml.Node) -> None:
        self.marks.at[path] = (node.start_mark.line + 1, node.start_mark.column + 1)

    def _data(self, node: yaml.Node, path: Loc) -> Any:
        self.marks.at.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        self.marks.values[path] = node
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)
            data: dict[str, Any] = {}
            for key_node, value_node in node.value:
                # A key is its text: YAML 1.1 would read `on:` as true and `1:` as a number.
                if not isinstance(key_node, yaml.ScalarNode):
                    self._mark((*path,), key_node)
                    self.problems.append(((*path,), Rule.INVALID_VALUE, "a key must be a name"))
                    continue
                key = str(key_node.value)
                entry = (*path, key)
                if key in data:
                    self._mark(entry, key_node)
                    self.problems.append((entry, Rule.DUPLICATE_KEY, f"{key!r} is given twice"))
                    continue
                self._mark(entry, key_node)
                data[key] = self._data(value_node, entry)
            return data
        if isinstance(node, yaml.SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                self._mark((*path, index), item)
                items.append(self._data(item, (*path, index)))
            return items
        value = self.loader.construct_object(node, deep=True)
        if isinstance(value, dt.datetime | dt.date):
            return value.isoformat()
        if isinstance(value, bytes):
            self.problems.append((path, Rule.INVALID_VALUE, "binary data is not allowed"))
            return None
        if isinstance(value, float) and value != value:  # NaN is no JSON
            self.problems.append((path, Rule.INVALID_VALUE, "NaN is not allowed"))
            return None
        return value


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
    reader = _Reader(text)
    try:
        data = reader.read()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
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

    ``names`` and membership (``in``) cover every pipeline this process has served, so runs
    that started on a file since removed still pass the activity caller check.
    """

    def __init__(self, path: Path, catalog: Catalog, reserved: Collection[str] = ()) -> None:
        self.path = path
        self._catalog = catalog
        self._reserved = frozenset(reserved)
        self._cache: dict[Path, tuple[tuple[int, int], CheckedFile]] = {}
        self._served: set[str] = set()

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
        self._served.update(found.records)
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

    def get(self, name: str) -> PipelineRecord | None:
        """The pipeline called ``name`` as its file is now, if it has no problem.

        Raises:
            PipelineFilesInvalid: no valid file names it and some file has problems (it may be
                the one).
        """
        found = self.scan()
        record = found.records.get(name)
        if record is None and found.problems:
            raise PipelineFilesInvalid(
                list(found.problems),
                f"no valid pipeline {printable(name, 64)!r}; files with problems",
            )
        return record

    def names(self) -> list[str]:
        """The pipelines the folder has now and every one this process served."""
        return sorted({*self.scan().records, *self._served})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()


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
