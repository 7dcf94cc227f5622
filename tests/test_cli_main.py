"""The ``opcore`` command as a whole: help, version, usage errors, colour, entry points."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import REPO, assert_one_line_error, environment, run_cli

from opcore import __version__
from opcore.cli import main
from opcore.cli.inputs import parse_attr
from opcore.cli.render import Style, format_seconds, style_for, table, visible_len

COMMANDS = ("doctor", "ops", "explain", "bench")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: opcore {command}")
    assert "examples:" in out and "--color" in out


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    {command}" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"opcore {__version__} (Python ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "opcore: error: the following arguments are required: COMMAND"),
        (["dokter"], "opcore: error: argument COMMAND: invalid choice: 'dokter'"),
        (["doctor", "--jsn"], "opcore: error: unrecognized arguments: --jsn"),
        (
            ["ops", "--matrix", "--markdown"],
            "opcore ops: error: argument --markdown: not allowed with argument --matrix",
        ),
        (["doctor", "--color", "pink"], "opcore doctor: error: argument --color: invalid choice: 'pink'"),
    ],
)
def test_usage_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_python_dash_m_and_the_console_script() -> None:
    result = run_cli("--version")
    assert result.status == 0 and result.out.startswith("opcore ")
    script = Path(sys.executable).parent / "opcore"
    if not script.exists():
        pytest.skip("the opcore console script is not installed next to this Python")
    done = subprocess.run([str(script), "ops", "--tag", "fused"], capture_output=True, text=True, env=environment(),
                          cwd=REPO, check=False)  # fmt: skip
    assert done.returncode == 0 and "linear_relu(" in done.stdout


def test_no_traceback_for_bad_input_through_the_script() -> None:
    assert_one_line_error(run_cli("explain", "linear", "--shapes", "2x8,4x9"), "linear(): argument 'w'")


def test_colour_only_when_asked_or_on_a_terminal() -> None:
    assert "\x1b[" not in run_cli("ops", "--tag", "fused").out  # stdout is a pipe
    assert "\x1b[1m" in run_cli("ops", "--tag", "fused", "--color", "always").out
    assert "\x1b[1m" in run_cli("--color", "always", "ops", "--tag", "fused").out  # before the command, too
    assert "\x1b[" not in run_cli("ops", "--tag", "fused", "--color", "never").out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_style_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert style_for(_Terminal()).enabled
    assert not style_for(io.StringIO()).enabled
    assert style_for(io.StringIO(), "always").enabled
    assert not style_for(_Terminal(), "never").enabled
    monkeypatch.setenv("NO_COLOR", "1")
    assert not style_for(_Terminal()).enabled
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not style_for(_Terminal()).enabled


def test_table_aligns_coloured_cells_and_keeps_long_last_cells_out_of_the_widths() -> None:
    style = Style(True)
    text = table([("a", style.good("bb"), "c"), ("ddd", "e"), ("f", "a long note that must not widen column two")],
                 indent="", header=False)  # fmt: skip
    lines = text.splitlines()
    assert visible_len(lines[0]) == len("ddd  bb  c")
    assert lines[1] == "ddd  e"
    assert lines[2] == "f    a long note that must not widen column two"


def test_format_seconds() -> None:
    assert [format_seconds(s) for s in (2.5, 0.0123, 4.2e-6, 3e-8, None)] == [
        "2.50 s", "12.3 ms", "4.20 µs", "30.0 ns", "-",
    ]  # fmt: skip


def test_parse_attr() -> None:
    assert parse_attr("dim=-1") == ("dim", -1)
    assert parse_attr("normalized_shape=[4, 8]") == ("normalized_shape", (4, 8))
    assert parse_attr("approximate=tanh") == ("approximate", "tanh")
    assert parse_attr("is_causal=True") == ("is_causal", True)
    assert parse_attr("scale=none") == ("scale", None)
    assert parse_attr(" eps = 1e-5 ") == ("eps", 1e-5)
