"""The `aiorch` command line in this process (Typer's runner): key making, the `stuck` cutoff,
and the one line a user sees when Temporal cannot be reached."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import pytest
import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from temporalio.service import RPCError, RPCStatusCode
from typer.core import TyperGroup
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.cli.app import COMMANDS
from aiorch.cli.ops import stuck_cutoff
from aiorch.cli.output import (
    CliError,
    RunDidNotComplete,
    UsageError,
    cli_app,
    command_group,
    err_console,
    fits_terminal,
    one_line_errors,
    out,
    plain,
    print_error,
    print_json,
    print_table,
    usage_error_text,
)
from aiorch.cli.reviews import signed_json
from aiorch.devstack.processes import free_port
from aiorch.ops.reviews import ReviewTarget
from aiorch.ops.signing import SigningKey
from aiorch_runtime.codec import keyring_from_settings
from aiorch_runtime.config import Settings
from workflows.engine.identity import Expected, parse_review_keys, review_token_problem
from workflows.payloads import ReviewDecision


@pytest.mark.parametrize(("options", "key_id"), [([], "k1"), (["--id", "k2"], "k2")])
def test_payload_key_is_one_whole_configuration_line(options: list[str], key_id: str) -> None:
    """`keys payload` prints one line, PAYLOAD_KEYS=ID:KEY, which the settings take as the
    workers read them: a ring of that one key, current (``--id`` names it, for rotation)."""
    done = CliRunner().invoke(build_app(), ["keys", "payload", *options])
    assert done.exit_code == 0
    [line] = done.output.splitlines()
    name, value = line.split("=", 1)
    assert name == "PAYLOAD_KEYS"
    ring = keyring_from_settings(Settings(payload_keys=value))
    assert ring is not None and ring.current_id == key_id and set(ring.keys) == {key_id}


def test_payload_key_with_an_id_the_workers_refuse_is_one_line() -> None:
    """A key id the key ring would refuse is refused at once, in one line, printing no key."""
    done = CliRunner().invoke(build_app(), ["keys", "payload", "--id", "k 2"])
    assert done.exit_code == 1
    assert done.output.startswith("error: cannot make this key: PAYLOAD_KEYS: each entry")
    assert len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("options", "reviewers"),
    [([], ["alice"]), (["--signs-for", "bob", "--signs-for", "carol"], ["bob", "carol"])],
)
def test_reviewer_key_prints_both_configuration_lines(
    options: list[str], reviewers: list[str]
) -> None:
    """`keys reviewer NAME` prints REVIEWER_KEY and REVIEW_PUBLIC_KEYS lines that the CLI and
    the workers load, the public key signing for NAME unless told whom."""
    done = CliRunner().invoke(build_app(), ["keys", "reviewer", "alice", *options])
    assert done.exit_code == 0
    lines = dict(line.split("=", 1) for line in done.output.splitlines())
    assert set(lines) == {"REVIEWER_KEY", "REVIEW_PUBLIC_KEYS"}
    settings = Settings(
        reviewer_key=lines["REVIEWER_KEY"], review_public_keys=lines["REVIEW_PUBLIC_KEYS"]
    )
    [public] = settings.review_keys()
    assert (public.key_id, public.reviewers) == ("alice", reviewers)
    assert SigningKey.parse(lines["REVIEWER_KEY"]).key_id == "alice"


def test_identity_provider_key_signs_for_anyone() -> None:
    """`keys reviewer inbox --any` makes a key that may sign for any reviewer."""
    done = CliRunner().invoke(build_app(), ["keys", "reviewer", "inbox", "--any"])
    public = dict(line.split("=", 1) for line in done.output.splitlines())["REVIEW_PUBLIC_KEYS"]
    assert Settings(review_public_keys=public).review_keys()[0].reviewers is None


def test_reviewer_key_with_a_bad_name_is_one_line() -> None:
    """A key id the workers would refuse is refused at once, in one line, printing no key."""
    done = CliRunner().invoke(build_app(), ["keys", "reviewer", "bad name:x"])
    assert done.exit_code == 1
    assert done.output.startswith("error: cannot make this key: ")
    assert len(done.output.strip().splitlines()) == 1


def test_stuck_cutoff_from_a_threshold_or_a_moment() -> None:
    """`--older-than` counts back from now; `--before` is the moment itself, UTC unless it
    names its zone; a duration that does not parse is the user's one-line error."""
    before = datetime.now(UTC) - timedelta(minutes=90)
    cutoff, title = stuck_cutoff("1h30m", None)
    assert before <= cutoff <= datetime.now(UTC) - timedelta(minutes=90)
    assert title == "longer than 1h30m"
    naive = datetime(2026, 11, 30, 10, 0)
    assert stuck_cutoff("1h", naive)[0] == naive.replace(tzinfo=UTC)
    with pytest.raises(CliError, match="--older-than"):
        stuck_cutoff("soon", None)


def test_unreachable_temporal_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing listening at TEMPORAL_ADDRESS, a command says so in one line naming the
    address and what to do, and exits 1."""
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    done = CliRunner().invoke(build_app(), ["status", "0123456789abcdef01234567"])
    assert done.exit_code == 1
    assert done.output.startswith(f"error: cannot connect to Temporal at {address} (")
    assert "make dev" in done.output
    assert len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["review", "0123456789abcdef01234567", "reedit"],
        ["review", "0123456789abcdef01234567", "reedit", "--feedback", "  "],
        ["review", "0123456789abcdef01234567", "reedit", "--print"],
        ["review-all", "reedit", "-y"],
    ],
)
def test_a_reedit_without_feedback_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """`review ID reedit` and `review-all reedit` with no feedback (or only blanks) are one
    line saying a reedit needs --feedback, exit 2, as the inbox refuses it: nothing is sent
    (Temporal's address has nothing listening, so a command that tried would say so)."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    done = CliRunner().invoke(build_app(), args)
    assert done.exit_code == 2
    assert done.output == "error: a reedit needs --feedback: say what the model should change\n"


def test_each_command_line_loads_its_module_and_help_lists_every_command() -> None:
    """`build_app(NAME)` registers NAME (from the module the table names), and the full app
    has exactly the table's commands, so no command is missing from help or loaded lazily by
    the wrong module."""
    full = typer.main.get_command(build_app())
    assert isinstance(full, TyperGroup)
    assert set(full.commands) == set(COMMANDS)
    for name in COMMANDS:
        alone = typer.main.get_command(build_app(name))
        assert isinstance(alone, TyperGroup)
        assert name in alone.commands


def test_review_print_gives_the_signed_json_any_client_can_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`review ID DECISION --print` prints the review signed for the run chain and round it
    found, as one JSON object: the argument a plain client (the Temporal CLI, the Web UI)
    sends; the run's own check accepts it, and a run that reuses the workflow id refuses it.
    Without REVIEWER_KEY it is one line saying what to set."""
    key = SigningKey.generate("alice")
    monkeypatch.delenv("REVIEWER_KEY_FILE", raising=False)
    monkeypatch.delenv("REVIEWER_KEY", raising=False)
    args = ["review", "0123456789abcdef01234567", "reedit", "--feedback", "shorter"]
    args += ["--round", "2", "--print"]
    refused = CliRunner().invoke(build_app(), args)
    assert refused.exit_code == 1
    assert refused.output.startswith("error: --print prints a signed review: set REVIEWER_KEY")

    target = ReviewTarget("0123456789abcdef01234567", "run-2", "chain-1", 2)
    payload = ReviewDecision(decision="reedit", reviewer="alice", feedback="shorter")
    decision = ReviewDecision.model_validate_json(signed_json(payload, target, key.signer()))
    assert (decision.decision, decision.reviewer, decision.review_round) == ("reedit", "alice", 2)
    keys = parse_review_keys(key.public_entry())
    for chain, problem in (("chain-1", None), ("chain-2", "another run of this workflow id")):
        expected = Expected(
            workflow_id=target.workflow_id, review_round=2, now=datetime.now(UTC), run_id=chain
        )
        found = review_token_problem(decision, keys=keys, expected=expected)
        assert found == problem or (problem is not None and found and problem in found)


def test_untrusted_text_prints_as_its_characters_without_control_bytes() -> None:
    """`plain` keeps markup as text and newlines, and drops C0 (ESC, BEL), DEL and C1 (CSI)
    controls; `print_json` prints the same data with every control character escaped."""
    assert plain("[/][bold red]x\x1b[31m\x07\x7f\x9b2J\nnext").plain == "[/][bold red]x[31m2J\nnext"
    with out.capture() as captured:
        print_json(json.dumps({"reason": "[/]\x1b[2J\x9bZ é"}))
    shown = captured.get()
    assert "\x1b" not in shown and "\x9b" not in shown
    assert json.loads(shown) == {"reason": "[/]\x1b[2J\x9bZ é"}


@pytest.mark.parametrize("width", [40, 80, 200])
def test_a_table_is_never_cut_it_wraps_or_becomes_lines(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """`print_table` at any width shows every cell whole (no ellipsis): a boxed table where
    it fits, else one aligned line per row under a header line, each value whole."""
    monkeypatch.setattr(out, "width", width)
    rows = [
        ("0123456789abcdef01234567", "generate_embedding", "escalation_timeout", "a b " * 30),
        ("fedcba9876543210fedcba98", "await_review", "needs_review", ""),
    ]
    with out.capture() as captured:
        print_table(("id", "from", "event", "detail"), rows, title="t", wrap=("detail",))
    shown = captured.get()
    assert "…" not in shown
    for row in rows:
        for cell in row[:3]:
            assert cell in shown.split(), (cell, shown)
    boxed = "┃" in shown
    assert boxed == (width >= 80)  # a detail column fits from 74 columns, wrapped
    if not boxed:
        lines = shown.splitlines()
        assert lines[:2] == [
            "t",
            "id                        from                event               detail",
        ]
        assert lines[3] == "fedcba9876543210fedcba98  await_review        needs_review"


def test_json_is_printed_indented_by_two_with_its_characters_as_they_are() -> None:
    """`print_json` indents by two spaces and writes non-ASCII characters as themselves (a
    vendor named "Müller" reads as such, not as an escape)."""
    with out.capture() as captured:
        print_json('{"vendor": "M\u00fcller", "lines": [1]}')
    assert captured.get() == '{\n  "vendor": "Müller",\n  "lines": [\n    1\n  ]\n}\n'


def test_a_table_fits_a_terminal_exactly_as_wide_as_it_needs() -> None:
    """A table fits a terminal of its minimum width (every cell whole), not one a column
    narrower."""
    table = Table("id", "state")
    table.add_row("0123456789abcdef", "await_review")
    console = Console(width=200)
    needed = Measurement.get(console, console.options, table).minimum
    assert fits_terminal(table, Console(width=needed))
    assert not fits_terminal(table, Console(width=needed - 1))


def test_a_boxed_table_shows_its_title_headers_and_right_justified_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the table fits, it is drawn under its title with each column's header; the
    ``justify_right`` columns (counts) are aligned right, the others left."""
    monkeypatch.setattr(out, "width", 80)
    with out.capture() as captured:
        print_table(
            ("name", "count"),
            [("a", "1"), ("bbbbbb", "22")],
            title="Runs",
            justify_right=("count",),
        )
    lines = captured.get().splitlines()
    assert lines[0].strip() == "Runs"
    assert lines[2] == "┃ name   ┃ count ┃"
    assert lines[4:6] == ["│ a      │     1 │", "│ bbbbbb │    22 │"]


def test_a_word_wider_than_rich_gives_its_column_is_folded_not_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sharing the width between two wrapped columns, Rich may give one less than its longest
    word (here 21 of 30 characters): the word goes on in the next line, whole, no ellipsis."""
    monkeypatch.setattr(out, "width", 50)
    word = "W" * 30
    with out.capture() as captured:
        print_table(("a", "b"), [(word + " y" * 40, "z " * 60)], wrap=("a", "b"))
    shown = captured.get()
    assert "…" not in shown
    assert [line.split("│")[1].strip() for line in shown.splitlines()[3:5]] == [
        "W" * 21,
        "W" * 9 + " y y y y y y",
    ]


def test_a_table_as_lines_keeps_its_bold_header_and_each_cells_style(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal too narrow for the table, the header line is bold and a cell given as
    styled text keeps its style."""
    monkeypatch.setattr(out, "width", 10)
    monkeypatch.setattr(out, "record", True)
    print_table(("name", "state"), [("a", Text("failed", style="red"))], title="Runs")
    shown = out.export_html(inline_styles=True, code_format="{code}")
    assert shown.splitlines() == [
        "Runs",
        '<span style="font-weight: bold">name</span>  <span style="font-weight: bold">state</span>',
        'a     <span style="color: #800000; text-decoration-color: #800000">failed</span>',
    ]


def test_a_usage_error_says_where_help_is_when_it_knows_the_command() -> None:
    """A command line Click refuses names its command's ``--help``; an error that knows no
    command is its message alone."""
    done = CliRunner().invoke(build_app(), ["status", "x", "--bogus"])
    assert done.exit_code == 2
    assert done.output.endswith("(see root status --help)\n"), done.output
    assert usage_error_text(typer.TyperException("no such thing")) == "no such thing"


FAILURES: dict[str, Exception] = {
    "cli": CliError("the file [/] is missing"),
    "run": RunDidNotComplete("the run failed"),
    "usage": UsageError("say what to change"),
    "rpc": RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b""),
}


def small_app() -> typer.Typer:
    """An app made as the `aiorch` app is: two commands and a group of two."""
    app = cli_app("Tools for a test.")

    @app.command()
    def stop() -> None:
        """Stop: the user said no."""
        raise typer.Abort()

    @app.command()
    @one_line_errors
    def fail(kind: str) -> None:
        """Fail as asked."""
        raise FAILURES[kind]

    @app.command()
    def crash() -> None:
        """Fail as a bug would."""
        raise RuntimeError("a bug")

    @app.command()
    def greet() -> str:
        """Greet, returning the greeting to a caller in Python."""
        return "hello"

    things = command_group("Things, listed and counted.")

    @things.command("list")
    def list_things() -> None:
        """List every thing there is, each on a line of its own, however long this first
        paragraph grows.

        Nothing of this second paragraph is in the group's list."""

    @things.command("count", short_help="How many.")
    def count() -> None:
        """Count them all, one by one."""

    app.add_typer(things, name="things")
    return app


def test_a_bare_app_shows_its_help_with_the_exit_codes() -> None:
    """An app called with no arguments prints its help, in Click's plain layout (no Rich
    panels, no shell completion options), ending with the exit codes, and succeeds."""
    done = CliRunner().invoke(small_app(), [])
    assert done.exit_code == 0
    assert done.output.startswith("Usage: root [OPTIONS] COMMAND [ARGS]...\n\n  Tools for a test.")
    assert "╭" not in done.output and "--install-completion" not in done.output
    assert done.output.endswith("    130 interrupted (Ctrl-C)\n")


def test_a_bare_group_shows_each_commands_whole_first_paragraph() -> None:
    """A command group called alone prints its help and succeeds; it lists each command with
    the whole first paragraph of its help (not cut at Click's 45 characters), and no more, or
    with the short help the command names itself."""
    done = CliRunner().invoke(small_app(), ["things"])
    assert done.exit_code == 0
    assert done.output.startswith("Usage: root things [OPTIONS] COMMAND")
    assert "  Things, listed and counted.\n" in done.output
    listed = " ".join(done.output.split("Commands:", 1)[1].split())
    assert listed == (
        "list List every thing there is, each on a line of its own, however long this first "
        "paragraph grows. count How many."
    )


@pytest.mark.parametrize(
    ("args", "line", "code"),
    [
        (["stop"], "error: aborted; nothing was done", 1),
        (["fail", "cli"], "error: the file [/] is missing", 1),
        (["fail", "run"], "error: the run failed", 3),
        (["fail", "usage"], "error: say what to change", 2),
        (["fail", "rpc"], "error: connection refused", 1),
        (["stop", "--x"], "error: No such option: --x (see root stop --help)", 2),
        (
            ["things", "cont"],
            "error: No such command 'cont'. Did you mean 'count'? (see root things --help)",
            2,
        ),
    ],
)
def test_each_failure_is_one_error_line_and_its_exit_status(
    args: list[str], line: str, code: int
) -> None:
    """An abort, an expected failure (a user's error, a run that did not complete, a command
    line asking for nothing a command does, Temporal's error) and a command line that does not
    parse each end in one ``error:`` line, the message printed as written, and the exit
    status of its kind."""
    done = CliRunner().invoke(small_app(), args)
    assert (done.output, done.exit_code) == (f"{line}\n", code)


def test_clicks_own_arguments_reach_click() -> None:
    """What a caller gives the app's ``main`` besides the command line reaches Click as Click's
    own groups pass it: context settings (here the terminal's width) and the name of the
    shell-completion variable (completion is off, so asking for it by that name is refused)."""
    done = CliRunner().invoke(small_app(), ["things"], terminal_width=40)
    assert done.exit_code == 0
    assert max(len(line) for line in done.output.splitlines()) <= 40
    asked = {"_TOOLS_COMPLETE": "bash_source"}
    done = CliRunner().invoke(small_app(), [], complete_var="_TOOLS_COMPLETE", env=asked)
    assert (done.output, done.exit_code) == ("Shell source not supported.\n", 1)


def test_an_unexpected_error_is_pythons_own_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error no command expects (a bug) leaves the app as Python's plain traceback, which
    an issue can quote, not a framed Rich one."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the app installs Typer's hook
    for name in ("TYPER_STANDARD_TRACEBACK", "_TYPER_STANDARD_TRACEBACK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError) as info:
        small_app()(["crash"])
    sys.excepthook(info.type, info.value, info.tb)
    shown = capsys.readouterr().err
    assert shown.startswith("Traceback (most recent call last):\n")
    assert shown.endswith("RuntimeError: a bug\n")
    assert "╭" not in shown


def test_a_commands_return_value_is_no_exit_status_or_output() -> None:
    """A command that returns a value (for a caller in Python) succeeds and prints nothing of
    it."""
    done = CliRunner().invoke(small_app(), ["greet"])
    assert (done.output, done.exit_code) == ("", 0)


def test_the_error_prefix_is_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """``error:`` is shown in red, the message after it in the terminal's own colour."""
    monkeypatch.setattr(err_console, "record", True)
    print_error("the run [red]x[/] failed")
    shown = err_console.export_html(inline_styles=True, code_format="{code}")
    assert shown == (
        '<span style="color: #800000; text-decoration-color: #800000">error:</span> '
        "the run [red]x[/] failed\n"
    )


def test_start_asks_for_a_lane_and_refuses_an_unknown_one() -> None:
    """`start --lane batch` puts the lane in the request's options; a lane that is not sync or
    batch is refused by the command line before anything starts."""
    from aiorch.cli.requests import build_request

    message = {"user_message": "hello"}
    request = build_request(message, None, "auto", None, {"lane": "batch", "max_cost_usd": None})
    assert request.options.lane == "batch"
    assert build_request(message, None, "auto", None, {"lane": None}).options.lane is None
    done = CliRunner().invoke(build_app(), ["start", "hello", "--lane", "fastest"])
    assert done.exit_code == 2
    assert "fastest" in done.output
