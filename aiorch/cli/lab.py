"""``aiorch lab run``: the replay lab (docs/lab.md). It selects recorded runs from the ledger,
forks each from a state onto a candidate (and onto its own settings, the baseline), and
reports what changed: a summary on stdout, the report's Markdown, HTML and JSON in ``--out``,
and exit status 4 when a ``--fail-if`` rule holds."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from temporalio.client import Client

from aiorch.cli.output import (
    EXIT_CHECK_FAILED,
    CliError,
    UsageError,
    command_group,
    err_console,
    one_line_errors,
    out,
    plain,
    print_json,
    print_table,
)
from aiorch.cli.session import run_async
from aiorch.ops import ledger
from aiorch.ops.lab.expressions import ExpressionError
from aiorch.ops.lab.forks import run_forks
from aiorch.ops.lab.gates import Gate, check_all, parse_gate
from aiorch.ops.lab.outcomes import LabRun
from aiorch.ops.lab.report import build_report
from aiorch.ops.lab.report_files import write_reports
from aiorch.ops.lab.report_rows import HEADER, deltas_line, gate_line, heading, totals_rows
from aiorch.ops.lab.scores import ScoreRule, parse_score
from aiorch.ops.lab.selection import SelectionRefused, selected_runs
from aiorch_runtime.config import Settings, load_settings
from workflows.payloads import Variant

lab_app = command_group("The replay lab: fork recorded runs onto a candidate and compare.")

# The option that sets each of the candidate's fields, for its errors.
_CANDIDATE_OPTIONS = {
    "name": "--name",
    "model": "--model",
    "system_prompt": "--system-prompt-file",
    "user_prompt": "--prompt-file",
    "temperature": "--temperature",
}


class CheckFailed(CliError):
    """A ``--fail-if`` rule held; exit status 4."""

    exit_code = EXIT_CHECK_FAILED


def _read(option: str, path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{option}: cannot read {path}: {err}") from None


def candidate_of(
    *,
    name: str,
    model: str | None,
    system_prompt_file: Path | None,
    prompt_file: Path | None,
    temperature: float | None,
) -> Variant:
    """The candidate the options describe.

    Raises:
        UsageError: a file cannot be read, a value is refused, or nothing would change.
    """
    try:
        candidate = Variant(
            name=name,
            model=model,
            system_prompt=_read("--system-prompt-file", system_prompt_file),
            user_prompt=_read("--prompt-file", prompt_file),
            temperature=temperature,
        )
    except ValidationError as err:
        first = err.errors()[0]
        option = _CANDIDATE_OPTIONS.get(str(first["loc"][0]), str(first["loc"][0]))
        raise UsageError(f"{option}: {first['msg']}") from None
    if not candidate.changes:
        raise UsageError(
            "the candidate changes nothing: give --model, --system-prompt-file, --prompt-file "
            "or --temperature"
        )
    return candidate


def rules_of(fail_if: list[str], score: str | None) -> tuple[list[Gate], ScoreRule | None]:
    """The ``--fail-if`` rules and the ``--score`` rule, checked before anything runs.

    Raises:
        UsageError: a rule does not parse, or reads ``score_rate`` with no ``--score``.
    """
    try:
        rule = None if score is None else parse_score(score)
    except ExpressionError as err:
        raise UsageError(f"--score: {err}") from None
    gates = []
    for text in fail_if:
        try:
            gate = parse_gate(text)
        except ExpressionError as err:
            raise UsageError(f"--fail-if: {err}") from None
        if rule is None and any(path[-1] == "score_rate" for path in gate.expression.paths()):
            raise UsageError(f"--fail-if: {text!r} reads score_rate: give --score too")
        gates.append(gate)
    return gates, rule


def runs_of(url: str, select: str, limit: int) -> list[str]:
    """The run ids ``--select`` picks from the ledger.

    Raises:
        UsageError: the statement would write, or selects no run_id or too many runs.
        CliError: it did not run, or selected no run.
    """
    try:
        run_ids = selected_runs(url, select, limit=limit)
    except (ledger.NotReadOnly, SelectionRefused) as err:
        raise UsageError(f"--select: {err}") from None
    except ledger.QueryFailed as err:
        raise CliError(f"--select: {err}") from None
    if not run_ids:
        raise CliError("--select: the query selected no run; nothing to fork")
    return run_ids


def conclude(
    lab: LabRun,
    *,
    rule: ScoreRule | None,
    gates: list[Gate],
    out_dir: Path | None,
    as_json: bool,
) -> None:
    """Report ``lab``: the files in ``out_dir``, the summary (or the JSON) on stdout.

    Raises:
        CliError: the files cannot be written, or a rule reads a metric with no value.
        CheckFailed: a ``--fail-if`` rule held.
    """
    try:
        report = check_all(build_report(lab, rule), gates)
    except ExpressionError as err:
        raise CliError(f"--fail-if: {err}") from None
    if out_dir is not None:
        try:
            written = write_reports(report, out_dir)
        except OSError as err:
            raise CliError(f"--out: cannot write the report: {err}") from None
        err_console.print(plain(f"wrote {', '.join(str(path) for path in written)}"))
    if as_json:
        print_json(report.model_dump_json())
    else:
        for line in heading(report):
            out.print(plain(line))
        print_table(
            HEADER,
            [[plain(row.label), *map(plain, row.cells)] for row in totals_rows(report.totals)],
            justify_right=HEADER[1:],
        )
        out.print(plain(deltas_line(report.deltas)))
        for gate in report.gates:
            out.print(plain(gate_line(gate)))
    if report.held:
        rules = "; ".join(gate.rule for gate in report.held)
        raise CheckFailed(f"--fail-if held: {rules}")


@lab_app.command("run")
@one_line_errors
def run_command(
    select: Annotated[
        str,
        typer.Option(
            metavar="SQL", help='the runs to fork: "SELECT run_id FROM runs WHERE ..." (the ledger)'
        ),
    ],
    from_state: Annotated[
        str,
        typer.Option(
            "--from", metavar="STATE", help="the state the forks start in (analyze, invoke_llm)"
        ),
    ],
    model: Annotated[str | None, typer.Option(help="the candidate's model")] = None,
    system_prompt_file: Annotated[
        Path | None, typer.Option(metavar="FILE", help="the candidate's system prompt, from a file")
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="the candidate's user prompt template, from a file"),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="the candidate's temperature (0 to 2)")
    ] = None,
    name: Annotated[str, typer.Option(help="the candidate's name in the report")] = "candidate",
    limit: Annotated[
        int, typer.Option(min=1, metavar="N", help="refuse a --select of more runs than this")
    ] = 50,
    max_cost_usd: Annotated[
        float | None,
        typer.Option(min=0.0, metavar="USD", help="stop starting forks once they cost this"),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="DIR", help="write report.md, report.html and report.json here"
        ),
    ] = None,
    fail_if: Annotated[
        list[str] | None,
        typer.Option(
            metavar="RULE",
            help='exit 4 when this holds (repeat it): "problems_rate > baseline + 0.02"',
        ),
    ] = None,
    score: Annotated[
        str | None,
        typer.Option(metavar="RULE", help='a rule each fork passes or fails: "problems == 0"'),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="the report's JSON instead of the summary")
    ] = False,
) -> None:
    """Fork each run --select picks from the ledger at its --from state twice, onto the
    candidate and onto its own settings (the baseline), and report what the candidate changed.

    The forks are new runs seeded with the original's outputs up to --from; they store
    nothing, notify no one and never wait for a reviewer. Progress goes to stderr, the summary
    to stdout; --fail-if (repeatable) exits 4 when a rule over the totals holds (docs/lab.md).
    """
    gates, rule = rules_of(fail_if or [], score)
    candidate = candidate_of(
        name=name,
        model=model,
        system_prompt_file=system_prompt_file,
        prompt_file=prompt_file,
        temperature=temperature,
    )
    run_ids = runs_of(load_settings().ledger_url.get_secret_value(), select, limit)
    lab_id = f"lab-{secrets.token_hex(6)}"
    err_console.print(
        plain(
            f"{lab_id}: forking {len(run_ids)} run(s) from {from_state} onto {candidate.describe()}"
        )
    )

    async def forks(client: Client, settings: Settings) -> LabRun:
        return await run_forks(
            client,
            settings,
            run_ids,
            from_state=from_state,
            candidate=candidate,
            lab_id=lab_id,
            spend_cap_usd=max_cost_usd,
            progress=lambda line: err_console.print(plain(line)),
        )

    conclude(run_async(forks), rule=rule, gates=gates, out_dir=out_dir, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add the ``lab`` group to ``app``."""
    app.add_typer(lab_app, name="lab")
