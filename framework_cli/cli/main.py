"""The root `fw` app and the one boundary where errors become output and exit codes."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from ..errors import FwError
from .output import emit_error, json_wanted, set_root_json


class FwGroup(TyperGroup):
    """Runs the command with click's standalone handling off, so that every failure,
    usage errors included, is rendered here: JSON on stdout in JSON mode, a message and a
    hint on stderr otherwise, and never a traceback."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        from typer._click.exceptions import (
            ClickException,
            NoArgsIsHelpError,
            UsageError,
        )
        from typer.exceptions import Abort

        from ..home import secrets

        args = list(sys.argv[1:] if args is None else args)
        set_root_json(False)
        secrets.forget_all()  # what is redacted comes from this invocation's home, not an earlier one
        # `fw tool call` always answers in JSON, its errors included
        as_json = json_wanted("--json" in args) or _is_tool_call(args)
        code = 0
        try:
            rv = super().main(args, prog_name or "fw", complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except FwError as exc:
            emit_error(exc, as_json)
            code = exc.exit_code
        except UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "fw"
            no_command = isinstance(exc, NoArgsIsHelpError) or exc.message == "Missing command."
            if no_command and exc.ctx is not None and not as_json:
                typer.echo(exc.ctx.get_help())  # `fw` or `fw resource` alone: show what it can do
                code = 0
            elif no_command:
                names = sorted(getattr(exc.ctx.command, "commands", {}) if exc.ctx else ())
                hint = f"one of: {', '.join(names)}; see `{command} --help`" if names else f"see `{command} --help`"
                emit_error(FwError("usage", f"`{command}` needs a command", hint), as_json)
                code = 2
            else:
                message = exc.format_message().replace("Value error, ", "")
                emit_error(FwError("usage", message, f"see `{command} --help`"), as_json)
                code = 2
        except ClickException as exc:
            emit_error(FwError("usage", exc.format_message(), "see `fw --help`"), as_json)
            code = 2
        except Abort:
            emit_error(FwError("internal", "aborted", ""), as_json)
            code = 1
        except KeyboardInterrupt:
            code = 130
        except BrokenPipeError:
            code = 1
        except SystemExit as exc:  # typer's own exits, e.g. on a closed pipe
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # the last line of defence: a message, never a traceback
            if os.environ.get("FW_RAISE_ERRORS"):
                raise  # for debugging and tests: let a bug show its traceback
            emit_error(
                FwError(
                    "internal",
                    f"unexpected error: {type(exc).__name__}: {exc}",
                    "this is a bug in fw; please report it with the command you ran",
                ),
                as_json,
            )
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code


# Command groups, each a module of this package with its own Typer app.
GROUPS = (
    "home", "resource", "category", "agent", "principal", "binding", "run", "tool", "mcp", "audit",
    "session", "message", "memory", "dispatch", "task", "bot", "event",
)


def build_app(only: str | None = None) -> typer.Typer:
    """The root app with every command group, or with just `only`: building a group's
    commands costs start-up time, so a run registers only the group it was asked for."""
    import importlib

    root_app = typer.Typer(
        cls=FwGroup,
        name="fw",
        help="Safe, scriptable control of an agent framework's home: providers, models, prompts, "
        "skills, MCP servers, harnesses and agents, the identities agents run as, and the tools "
        "agents use. Every command takes --json.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    root_app.callback()(root)
    for name in GROUPS if only is None else [only]:
        module = importlib.import_module(f"{__package__}.{name}")
        root_app.add_typer(module.app, name=name)
    return root_app


def root(
    ctx: typer.Context,
    home: Annotated[
        Optional[str],
        typer.Option("--home", metavar="PATH", help="The framework home (default: $FW_HOME, then ~/.fw)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output for the command that follows.")] = False,
) -> None:
    from .output import set_root_json

    set_root_json(as_json)
    ctx.obj = {"home": home}


def _is_tool_call(argv: Sequence[str]) -> bool:
    words = [a for a in argv if not a.startswith("-")]
    return requested_group(argv) == "tool" and "call" in words[:3]


def requested_group(argv: Sequence[str]) -> str | None:
    """The command group named on the command line, if it is one we know."""
    args = iter(argv)
    for arg in args:
        if arg == "--home":
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg in GROUPS else None
    return None


def __getattr__(name: str) -> Any:
    if name == "app":  # the full app, for tests and tools that introspect it
        return build_app()
    raise AttributeError(name)


def main() -> None:
    build_app(requested_group(sys.argv[1:]))()
