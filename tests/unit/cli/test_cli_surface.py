"""The `mercato` command's surface on click (issue 23 item 3, decision 0300): `--version`, shell
completion, usage errors as one line naming the argument (exit 2), tables and progress bars
only for a person. Every case here fails before any database is opened."""

from __future__ import annotations

import importlib
import io
import re
import subprocess
import sys
from importlib.metadata import version

import click
import pytest

from mercato.cli.main import ADMIN_COMMANDS, COMMAND_MODULES, TOP_COMMANDS, main
from mercato.cli.output import progress, shows_progress, table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_prints_the_installed_distribution_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--version")
    assert (code, out, err) == (0, f"mercato {version('mercato')}\n", "")


def test_help_lists_the_commands_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "admin", "-h")
    assert code == 0
    for name in ("create-account", "verify-ledger", "resolve-invocation", "unlock"):
        assert name in out


# (argv, the argument the one line must name, what the line must also say)
USAGE_ERRORS = [
    ([], "COMMAND", "required"),
    (["frobnicate"], "COMMAND", "invalid choice: 'frobnicate'"),
    (["provider", "frobnicate"], "COMMAND", "invalid choice"),
    (["admin", "create-account", "a@example.com", "--frobnicate"], "--frobnicate", "unrecognized"),
    (["admin", "unlock", "a@example.com", "surplus"], "surplus", "unrecognized"),
    (["admin", "grant-points", "a@example.com"], "N", "required"),
    (["admin", "grant-points", "a@example.com", "-5"], "N", "not -5"),
    (["admin", "set-quota", "a@example.com", "--limit", "5"], "--window-seconds", "--policy"),
    (
        ["admin", "set-quota", "a@example.com", "--policy", "p", "--limit", "x",
         "--window-seconds", "5"],
        "--limit",
        "'x' is not a whole number",
    ),
    (["admin", "hold", "acme.search", "--reason"], "--reason", "requires an argument"),
    (["admin", "verify-ledger", "--json=yes"], "--json", "does not take a value"),
    (["admin", "resolve-invocation", "inv_1", "--reason", "r"], "--succeeded --failed", "one of"),
    (
        ["admin", "decide-report", "case_1", "--uphold", "--dismiss", "--reason", "r"],
        "--dismiss",
        "not allowed with argument --uphold",
    ),
    (["serve", "--port", "http"], "--port", "not a whole number"),
    (["serve", "--workers", "0"], "--workers", "must be from 1"),
    (["worker", "--idle-seconds", "soon"], "--idle-seconds", "soon"),
    (["up", "--port", "70000"], "--port", "a TCP port is 1-65535"),
    (["daily-ranking", "refresh", "--chart", "weekly"], "--chart", "weekly"),
    (["provider", "check", "http://127.0.0.1:9"], "--credential", "required"),
    (["provider", "push", "--contract", "c.json"], "--service-code", "--connection"),
    (["call", "acme.echo"], "VERSION", "required"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "name", "also"), USAGE_ERRORS)
def test_a_usage_error_is_one_line_naming_the_argument_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], name: str, also: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("error: ")
    assert name in line and also in line, line
    assert "Usage:" not in err and "Traceback" not in err


def test_bash_completion_script_names_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_MERCATO_COMPLETE", "bash_source")
    with pytest.raises(SystemExit) as exit_:
        main([])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "_mercato_completion()" in out
    assert "complete -o nosort -F _mercato_completion mercato" in out


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("mercato adm", ["plain,admin"]),
        ("mercato admin cre", ["plain,create-account", "plain,create-api-key"]),
        ("mercato admin publish --serv", ["plain,--service-code"]),
        ("mercato provider ", ["plain,check", "plain,init", "plain,push"]),
    ],
)
def test_completion_offers_commands_and_options(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    words: str,
    expected: list[str],
) -> None:
    monkeypatch.setenv("_MERCATO_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split(" ")) - 1))
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().out.splitlines() == expected


def test_a_table_has_a_header_and_one_line_per_row_when_piped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_name = "n" * 300  # far wider than any terminal: piped, it is never wrapped
    table(("SERVICE", "NAME"), [("acme.search", long_name), ("acme.echo", "Echo")], empty="-")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SERVICE", "NAME"]
    rows = [line.split() for line in lines if "acme." in line]
    assert rows == [["acme.search", long_name], ["acme.echo", "Echo"]]
    assert "\x1b[" not in "".join(lines)  # no colour codes into a pipe


def test_an_empty_table_is_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    table(("SERVICE",), [], empty="no public listings")
    assert capsys.readouterr().out == "no public listings\n"


def test_progress_is_drawn_only_on_a_terminal_and_never_with_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not shows_progress()  # pytest's captured stderr is not a terminal
    assert list(progress([1, 2], str, shown=shows_progress())) == [1, 2]
    assert capsys.readouterr() == ("", "")

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert shows_progress() and not shows_progress(as_json=True)
    assert list(progress(["a", "b"], lambda x: f"refreshing {x}", shown=True)) == ["a", "b"]
    assert "refreshing" in terminal.getvalue()


def test_the_lazy_command_tables_name_what_each_module_registers() -> None:
    """`main.TOP_COMMANDS`/`ADMIN_COMMANDS` say which module to import for a command (decision
    0391); registering every module by hand must give exactly those commands, module by module."""
    for module_name in COMMAND_MODULES:
        top, admin = click.Group("mercato"), click.Group("admin")
        importlib.import_module(f"mercato.cli.{module_name}").register(top, admin)
        assert {n for n, m in TOP_COMMANDS.items() if m == module_name} == set(top.commands)
        assert {n for n, m in ADMIN_COMMANDS.items() if m == module_name} == set(admin.commands)


def test_a_command_imports_only_its_own_module() -> None:
    """`mercato admin verify-ledger` in a fresh interpreter: the other command modules, the
    web app and the conformance runner stay unimported (decision 0391)."""
    probe = (
        "import sys\n"
        "from mercato.cli.main import main\n"
        "main(['admin', 'verify-ledger', '--help'])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('mercato'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    imported = set(done.stdout.split())
    assert "mercato.cli.commands_ledger" in imported
    assert not imported & {f"mercato.cli.{m}" for m in COMMAND_MODULES} - {
        "mercato.cli.commands_ledger",
        "mercato.cli.commands_core",  # the runtime every admin command builds
    }
    assert not {m for m in imported if m.startswith(("mercato.web", "mercato.conformance"))}


def _every_command_path() -> list[tuple[str, ...]]:
    """Every command and group of `mercato`, as the argv that reaches it (the root is ())."""
    paths: list[tuple[str, ...]] = []

    def walk(group: click.Group, path: tuple[str, ...], ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            sub = group.get_command(ctx, name)
            assert sub is not None, name
            paths.append((*path, name))
            if isinstance(sub, click.Group):
                walk(sub, (*path, name), click.Context(sub, parent=ctx, info_name=name))

    from mercato.cli.main import build_cli

    root = build_cli()
    walk(root, (), click.Context(root, info_name="mercato"))
    return paths


def test_every_help_is_whole_and_names_no_decision(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41 item 5: `--help` of every command shows no decision numbers, and every listing
    shows each command's one-line description whole, on one line (click cuts at 45 columns)."""
    monkeypatch.setenv("COLUMNS", "80")  # click's widest help; a narrower terminal wraps
    from mercato.cli.framework import whole_short_help
    from mercato.cli.main import build_cli

    paths = _every_command_path()
    assert len(paths) > 30
    for path in [(), *paths]:
        code, out, err = run(capsys, *path, "--help")
        assert (code, err) == (0, ""), path
        assert "decision" not in out.lower() and not re.search(r"\b0\d{3}\b", out), (path, out)
        command: click.Command = build_cli()
        ctx = click.Context(command, info_name="mercato")
        for name in path:
            assert isinstance(command, click.Group)
            found = command.get_command(ctx, name)
            assert found is not None
            command, ctx = found, click.Context(found, parent=ctx, info_name=name)
        if not isinstance(command, click.Group):
            continue
        listed = out[out.index("Commands:") :].splitlines()[1:]
        names = command.list_commands(ctx)
        assert len(listed) == len(names), (path, listed)  # one line per command: none wrapped
        for line, name in zip(listed, names, strict=True):
            sub = command.get_command(ctx, name)
            assert sub is not None
            description = whole_short_help(sub)
            assert description and not description.endswith(("...", "…")), (path, name)
            assert line.split() == [name, *description.split()], (path, line)
