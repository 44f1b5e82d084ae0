"""The root `fw` app and the one boundary where errors become output and exit codes."""

from __future__ import annotations

import inspect
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Optional

import typer
from typer._click.types import IntParamType, StringParamType
from typer.core import TyperArgument, TyperGroup, TyperOption

from ..errors import FwError, lone_surrogate_at
from .output import emit_error, json_wanted, set_home_option, set_json_lines, set_root_json


class FwArgument(TyperArgument):
    """An argument as usage lines write it: `KIND REF`, `[KIND]`, `PATH...`."""

    def make_metavar(self, ctx: Any, *, usage: bool = False) -> str:
        var = self.metavar or (self.name or "").upper()
        if var.startswith("["):
            return var
        if usage and not self.required:
            var = f"[{var}]"
        return var + ("..." if self.nargs != 1 else "")


class _Word(StringParamType):
    """Text whose metavar is the parameter's own name: help shows no `<str>` beside it."""

    def get_metavar(self, param: Any, ctx: Any) -> str:
        return ""


class _Number(IntParamType):
    """A whole number named by its argument (`TASK`), not by `<int>`."""

    def get_metavar(self, param: Any, ctx: Any) -> str:
        return ""


_PLAIN_TYPES = {StringParamType: _Word, IntParamType: _Number}


# Metavars of options by name; any other takes the last word of its name (`--unsupported-api API`).
OPTION_METAVARS = {
    "--as": "PRINCIPAL", "--member": "PRINCIPAL", "--principal": "PRINCIPAL", "--agent": "AGENT",
    "--builtin-tool": "GROUP", "--add-builtin-tool": "GROUP", "--remove-builtin-tool": "GROUP",
    "--event": "PATTERN", "--add-event": "PATTERN", "--remove-event": "PATTERN",
    "--platform-tool": "TOOL", "--add-platform-tool": "TOOL", "--remove-platform-tool": "TOOL",
    "--description": "TEXT", "--title": "TEXT", "--message": "TEXT", "--instructions": "TEXT",
    "--directory": "PATH", "--listen": "HOST:PORT",
}


def reflowed(text: str) -> str:
    """Help text with each paragraph on one line, so that the terminal wraps it at its width
    and never mid-sentence where the source broke a line (a paragraph that is a list, or holds
    indented lines, is kept as written)."""
    paragraphs = text.split("\n\n")
    return "\n\n".join(p if any(line.startswith((" ", "-", "\b")) for line in p.strip("\n").splitlines()[1:])
                       else " ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def tidy_params(command: Any) -> None:
    """Real metavars in usage lines and help, and help text that wraps at the terminal's width,
    for every command under `command`."""
    if command.help:
        command.help = reflowed(inspect.cleandoc(command.help))
    for param in command.params:
        if isinstance(param, TyperArgument) and not isinstance(param, FwArgument):
            param.__class__ = FwArgument  # same state, usage words of our own
            param.metavar = param.metavar or (param.name or "").upper()
            if type(param.type) in _PLAIN_TYPES:
                param.type = _PLAIN_TYPES[type(param.type)]()
        elif isinstance(param, TyperOption) and param.metavar is None and not param.is_flag and not param.count:
            long = max(param.opts, key=len)
            kind = getattr(param.type, "name", "")
            default = "N" if kind == "integer" else "SECONDS" if kind == "float" else long.rsplit("-", 1)[-1].upper()
            param.metavar = OPTION_METAVARS.get(long, default)
    for sub in (getattr(command, "commands", None) or {}).values():
        tidy_params(sub)


class FwGroup(TyperGroup):
    """Runs the command with click's standalone handling off, so that every failure,
    usage errors included, is rendered here: JSON on stdout in JSON mode, a message and a
    hint on stderr otherwise, and never a traceback."""

    def _main_shell_completion(self, ctx_args: Any, prog_name: str, complete_var: str | None = None) -> None:
        _completion_of_option_values()  # the shell's class is picked now: typer registers its own as it builds commands
        super()._main_shell_completion(ctx_args, prog_name, complete_var)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tidy_params(self)

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        from ..home import secrets  # lazy: start-up speed

        args = list(sys.argv[1:] if args is None else args)
        set_root_json(False)
        set_json_lines(False)
        secrets.forget_all()  # what is redacted comes from this invocation's home, not an earlier one
        location = sys.modules.get("framework_cli.state.location")
        if location is not None:  # loaded by an earlier command in this process: where the state lives is read afresh
            location.forget_state_urls()
        supervisor = sys.modules.get("framework_cli.runtime.supervisor")
        if supervisor is not None:
            supervisor.reopen()  # an earlier command in this process was interrupted: this one may run programs
        # `fw tool call` always answers in JSON, its errors included
        as_json = json_wanted("--json" in args) or _is_tool_call(args)
        _invocation.update(args=args, as_json=as_json)
        set_home_option(requested_home(args))
        if os.environ.get(COMPLETE_VAR):
            from typer.completion import completion_init

            completion_init()  # typer's completion classes answer the shell
        restore = _terminate_like_ctrl_c()
        try:
            code = self._guarded(args, prog_name, complete_var, as_json, extra)
            if code != 130:
                _keep_refreshed_indexes()
        finally:
            restore()
        if standalone_mode and code == 130 and _invocation["interrupted"]:
            _leave_now(code)
        if standalone_mode:
            sys.exit(code)
        return code

    def _guarded(self, args: list[str], prog_name: str | None, complete_var: str | None, as_json: bool, extra: Any) -> int:
        from typer._click.exceptions import ClickException, UsageError
        from typer.exceptions import Abort

        code = 0
        try:
            _refuse_non_text(args)
            rv = super().main(hoisted(args), prog_name or "fw", complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
            if code == 130:  # typer's answer to a KeyboardInterrupt (from our handler, or an event loop's)
                _invocation["interrupted"] = True
                code = _interrupted(as_json)
        except FwError as exc:
            emit_error(with_corrected_command(exc, args), as_json)
            code = exc.exit_code
        except UsageError as exc:
            code = _usage_error(exc, args, as_json)
        except ClickException as exc:
            emit_error(FwError("usage", exc.format_message(), "see `fw --help`"), as_json)
            code = 2
        except Abort:
            emit_error(FwError("internal", "aborted", ""), as_json)
            code = 1
        except KeyboardInterrupt:
            _invocation["interrupted"] = True  # also when an event loop took the signal itself
            code = _interrupted(as_json)
        except BrokenPipeError:
            code = 1
        except SystemExit as exc:  # typer's own exits, e.g. on a closed pipe
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # the last line of defence: a message, never a traceback
            if _only_interrupts(exc):  # Ctrl-C or SIGTERM inside a task group (fw mcp serve)
                return _interrupted(as_json)
            if not isinstance(exc, Exception) or os.environ.get("FW_RAISE_ERRORS"):
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
        return code


def _keep_refreshed_indexes() -> None:
    common = sys.modules.get("framework_cli.cli.common")
    if common is not None:  # loaded by every command that opened a home
        common.keep_refreshed_indexes()


def _refuse_non_text(args: list[str]) -> None:
    """Bytes that are not UTF-8 reach Python's argv as lone surrogates: no text field could
    store them, so they are refused before any command runs."""
    for position, arg in enumerate(args, 1):
        if lone_surrogate_at(arg, "") is not None:
            raise FwError("invalid", f"argument {position} is not UTF-8 text (it holds bytes no text can)",
                          "pass UTF-8 text; a file of other text can be converted with iconv", field=f"argv[{position}]")


def _terminate_like_ctrl_c() -> Any:
    """SIGTERM does what Ctrl-C does: the command unwinds (ending its runs, stopping their
    processes) and exits 130; a second SIGTERM while it unwinds is ignored. Both are noted, so
    that the boundary knows an exit of 130 was an interruption (typer turns one into a bare
    exit code). Returns what puts the previous handlers back (tests run many commands in one
    process)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may handle signals
    _invocation["interrupted"] = False

    def interrupt(signum: int, frame: Any) -> None:
        _invocation["interrupted"] = True
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGINT, signal.SIGTERM)}
    return lambda: [signal.signal(number, handler) for number, handler in previous.items()]


def _interrupted(as_json: bool) -> int:
    """Ctrl-C or SIGTERM: the runs were ended on the way out; stop whatever programs are
    still running (a dispatcher's workers may have some), then say so."""
    supervisor = sys.modules.get("framework_cli.runtime.supervisor")
    if supervisor is not None:  # it is loaded only once something has been run
        supervisor.stop_all()
    emit_error(FwError("interrupted", "interrupted: the runs it started were ended and their processes stopped",
                       "run the command again to go on"), as_json)
    return 130


def _leave_now(code: int) -> None:
    """Exit an interrupted command at once. Its runs are ended and its programs stopped; what
    is left are threads that cannot be told to stop (one blocked reading an MCP client's
    standard input, a dispatcher's worker waiting for a model), and a normal exit would wait
    for them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _only_interrupts(exc: BaseException) -> bool:
    """An exception group whose every member is a KeyboardInterrupt."""
    members = getattr(exc, "exceptions", None)
    if not isinstance(exc, BaseException) or members is None or not isinstance(members, tuple):
        return isinstance(exc, KeyboardInterrupt)
    return bool(members) and all(_only_interrupts(m) for m in members)


COMPLETE_VAR = "_FW_COMPLETE"
_invocation: dict[str, Any] = {"args": [], "as_json": False, "interrupted": False}  # this invocation's command line


def _usage_error(exc: Any, args: list[str], as_json: bool) -> int:
    """Render a click usage error. One rule for codes: a value that is not well-formed is
    `invalid` (exit 4); a missing or unknown command, argument or flag is `usage` (exit 2)."""
    from typer._click.exceptions import BadParameter, MissingParameter, NoArgsIsHelpError

    command = exc.ctx.command_path if exc.ctx else "fw"
    no_command = isinstance(exc, NoArgsIsHelpError) or exc.message == "Missing command."
    if no_command and exc.ctx is not None and not as_json:
        typer.echo(exc.ctx.get_help())  # `fw` or `fw resource` alone: show what it can do
        return 0
    if no_command:
        names = sorted(getattr(exc.ctx.command, "commands", {}) if exc.ctx else ())
        hint = f"one of: {', '.join(names)}; see `{command} --help`" if names else f"see `{command} --help`"
        error = FwError("usage", f"`{command}` needs a command", hint)
    elif isinstance(exc, BadParameter) and not isinstance(exc, MissingParameter):
        message = exc.format_message().replace("is not a valid int.", "is not a whole number.")
        error = FwError("invalid", message, f"see `{command} --help`")
    else:
        error = FwError("usage", exc.format_message().replace("Value error, ", ""), f"see `{command} --help`")
    emit_error(error, as_json)
    return error.exit_code


def hoisted(args: list[str]) -> list[str]:
    """The command line with the global options moved before the command: `--home` and
    `--json` are taken anywhere (as kubectl, gh and git take theirs), the last `--home` given
    winning. Nothing after `--` moves: it is an argument."""
    front: list[str] = []
    rest: list[str] = []
    as_json = False
    words = iter(args)
    for word in words:
        if word == "--":
            rest += [word, *words]
        elif word == "--home":
            value = next(words, None)
            if value is None or value.startswith("--"):  # no path after it (a path that looks like an option: ./--x)
                before = args[:args.index("--")] if "--" in args else args
                return ["--json"] * ("--json" in before) + ["--home"]  # refused as `fw --home` alone is
            front += [word, value]
        elif word.startswith("--home="):
            front.append(word)
        elif word == "--json":
            as_json = True
        else:
            rest.append(word)
    return front + ["--json"] * as_json + rest


def with_corrected_command(error: FwError, args: list[str]) -> FwError:
    """An error that names a close match (`did_you_mean`) gets, in its hint, the command
    line as it was typed with the mistyped word put right: a command to copy."""
    given, match = error.extra.get("given"), error.extra.get("did_you_mean")
    if not given or not match or given not in args:
        return error
    position = args.index(given)
    rest_of_line = _without_confirm(args[position + 1:])  # a confirmation was of the plan of the name mistyped
    corrected = shlex.join(["fw", *_without_confirm(args[:position]), match, *rest_of_line])
    rest = error.hint.split("? ", 1)[1] if error.hint.startswith("did you mean") else error.hint
    hint = f"did you mean `{corrected}`? {rest}"
    return FwError(error.code, error.message, hint, **error.extra)


def _without_confirm(args: list[str]) -> list[str]:
    """The arguments without `--confirm ITEMS` (or `--confirm=ITEMS`)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--confirm":
            skip = True
        elif not arg.startswith("--confirm="):
            kept.append(arg)
    return kept


# Command groups, each a module of this package with its own Typer app.
GROUPS = (
    "home", "resource", "category", "agent", "principal", "binding", "run", "tool", "mcp", "audit",
    "session", "message", "memory", "dispatch", "status", "state", "task", "turn", "bot", "event", "plugin", "web",
)


def show_version(ctx: typer.Context, param: Any, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .. import __version__  # lazy: start-up speed
    from .output import print_json, write_out  # lazy: start-up speed

    if _invocation["as_json"]:
        print_json({"name": "fw", "version": __version__})
    else:
        write_out(f"fw {__version__}")
    raise typer.Exit(0)


def completion_option(ctx: typer.Context, param: Any, value: bool) -> None:
    """--install-completion and --show-completion: typer's own, imported only when asked."""
    if not value or ctx.resilient_parsing:
        return
    from typer import completion
    from typer._completion_shared import _get_shell_name

    completion.completion_init()
    # A shell named after the option (`fw --show-completion zsh`, as `gh completion -s zsh`)
    # wins; else the shell is read from the process tree; where that finds none (an IDE, a
    # test runner, a setsid), $SHELL says which shell the user has.
    shell: Any = named_shell(_invocation["args"], "--" + param.name.replace("_", "-"))
    shell = shell or _get_shell_name() or os.path.basename(os.environ.get("SHELL", "")) or value
    if param.name == "install_completion":
        completion.install_callback(ctx, param, shell)
    else:
        completion.show_callback(ctx, param, shell)


SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def named_shell(args: list[str], option: str) -> str | None:
    """The shell named right after `option` on the command line, if one is."""
    if option in args:
        following = args[args.index(option) + 1: args.index(option) + 2]
        if following and following[0] in SHELLS:
            return following[0]
    return None


def build_app(only: str | None = None) -> typer.Typer:
    """The root app with every command group, or with just `only`: building a group's
    commands costs start-up time, so a run registers only the group it was asked for."""
    import importlib

    root_app = typer.Typer(
        cls=FwGroup,
        name="fw",
        help="Safe, scriptable control of an agent framework, in two halves. The configuration is "
        "a home of YAML files: providers, models, prompts, skills, MCP servers, harnesses and agents "
        "(fw resource, fw agent), and the identities agents run as (fw principal, fw binding). The "
        "runtime runs them: runs and their tools (fw run, fw tool, fw agent run), sessions where "
        "agents are mentioned (fw session, fw message) and answered by fw dispatch, tasks agents "
        "delegate (fw task), bots on chat platforms (fw bot, fw event) and a web page (fw web). "
        "Start with `fw home init`, then `fw agent create --help`. Every command takes --json.",
        no_args_is_help=False,  # a bare `fw` is a usage error rendered at the boundary: help, or one JSON document
        add_completion=False,  # the completion options are the root's own, loaded only when used
        context_settings={"help_option_names": ["-h", "--help"]},
        pretty_exceptions_enable=False,
    )
    root_app.callback()(root)
    for name in GROUPS if only is None else [only]:
        module = importlib.import_module(f"{__package__}.{name}")
        if hasattr(module, "command"):  # a command of its own, with no subcommands (`fw dispatch`)
            root_app.command(name)(module.command)
        else:
            root_app.add_typer(module.app, name=name)
    return root_app


def root(
    ctx: typer.Context,
    home: Annotated[
        Optional[str],
        typer.Option("--home", metavar="PATH", help="The framework home (default: $FW_HOME, then ~/.fw); anywhere on the command line."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output (also FW_JSON=1); anywhere on the command line.")] = False,
    version: Annotated[
        bool, typer.Option("--version", help="Show fw's version and exit.", is_eager=True, expose_value=False, callback=show_version)
    ] = False,
    install_completion: Annotated[
        bool, typer.Option("--install-completion", help="Install completion for the current shell, or the one named after it (bash, zsh, fish).", expose_value=False, callback=completion_option)
    ] = False,
    show_completion: Annotated[
        bool, typer.Option("--show-completion", help="Show the completion script for the current shell, or the one named after it (`fw --show-completion zsh`).", expose_value=False, callback=completion_option)
    ] = False,
) -> None:
    from .output import set_root_json  # lazy: start-up speed

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


def requested_home(argv: Sequence[str]) -> str | None:
    """The global option --home, wherever it is given (the last one wins)."""
    found = None
    args = iter(argv)
    for arg in args:
        if arg == "--":
            break
        if arg == "--home":
            found = next(args, None)
        elif arg.startswith("--home="):
            found = arg.split("=", 1)[1]
    return found


def __getattr__(name: str) -> Any:
    if name == "app":  # the full app, for tests and tools that introspect it
        return build_app()
    raise AttributeError(name)


def hoisted_completion(environ: Any) -> None:
    """A shell asking for completions (`_FW_COMPLETE`) is answered for the line as the command
    would run it: `--home` (and `--json`) moved before the command, so that a late `--home`
    names the home whose names are offered. The word being completed stays where it is, and
    so does the line while `--home`'s own value is being completed."""
    shell = environ.get("_FW_COMPLETE", "")
    try:
        if shell == "complete_bash" and "COMP_WORDS" in environ:
            words, at = shlex.split(environ["COMP_WORDS"]), int(environ.get("COMP_CWORD", "0"))
            done, rest = words[1:at], words[at:]
        elif shell in ("complete_zsh", "complete_fish") and environ.get("_TYPER_COMPLETE_ARGS"):
            line = environ["_TYPER_COMPLETE_ARGS"]
            words = shlex.split(line)
            done, rest = (words[1:], []) if line.endswith(" ") else (words[1:-1], words[-1:])
        else:
            return
    except ValueError:  # an open quote: the line is left as the shell gave it
        return
    if shell == "complete_bash":  # bash breaks `--opt=VALUE` into `--opt`, `=`, `VALUE`
        if len(done) >= 2 and done[-1] == "=" and done[-2].startswith("-"):
            done = done[:-1]  # the word completed is the option's value
        elif done and rest[:1] == ["="] and done[-1].startswith("-"):
            rest = [""]  # `--opt=` and nothing after it yet
        done = _joined_at_equals(done)
    if not words or not done or done[-1] == "--home":
        return
    moved = hoisted(done)
    if shell == "complete_bash":
        environ["COMP_WORDS"] = shlex.join([words[0], *moved, *rest])  # quoted again: click splits it as a shell would
        environ["COMP_CWORD"] = str(1 + len(moved))
    else:
        environ["_TYPER_COMPLETE_ARGS"] = shlex.join([words[0], *moved, *rest]) + (" " if not rest else "")


def _completion_of_option_values() -> None:
    """zsh and fish complete `--opt=PART` with `--opt=VALUE`: click offers the bare VALUE,
    which those shells match against the whole word typed, so they offered nothing (fish then
    offered file names)."""
    from typer._click.shell_completion import add_completion_class
    from typer._completion_classes import FishComplete, ZshComplete

    def whole_words(base: Any) -> Any:
        class WholeWords(base):  # type: ignore[misc, valid-type]
            def get_completions(self, args: list[str], incomplete: str) -> Any:
                items = super().get_completions(args, incomplete)
                if incomplete.startswith("-") and "=" in incomplete:
                    option = incomplete.partition("=")[0]
                    for item in items:
                        item.value = f"{option}={item.value}"
                return items

        return WholeWords

    add_completion_class(whole_words(ZshComplete), "zsh")
    add_completion_class(whole_words(FishComplete), "fish")


def _joined_at_equals(words: list[str]) -> list[str]:
    """`--opt`, `=`, `VALUE` (as bash breaks a word) put back as `--opt=VALUE`."""
    joined: list[str] = []
    for word in words:
        if len(joined) >= 2 and joined[-1] == "=" and joined[-2].startswith("-"):
            joined[-2:] = [f"{joined[-2]}={word}"]
        else:
            joined.append(word)
    return joined


def main() -> None:
    if "_FW_COMPLETE" in os.environ:  # a shell asks what to complete
        hoisted_completion(os.environ)
    build_app(requested_group(sys.argv[1:]))()
