"""The `gpufleet` command: one typer app; each area of the CLI registers its commands from its own module.

The areas are imported when the app is built, not when this module is: `gpufleet kube scheduler` and
`gpufleet kube operator` are long-running daemons whose start-up (a first bind, a failover) should not
wait for the embedded server, the node agent and the benchmarks to be imported, and `gpufleet
simulate` is timed from the command line (importing every area is most of a second). A command line
whose first word is the one command or group of an area (`SOLE_AREAS`) builds the app with that area
alone; any other gets every area.
"""

from __future__ import annotations

import atexit
import os
import sys

# Nothing but `atexit`, `os` and `sys` (built into or loaded with the interpreter) is imported at module
# level: the console script imports this module before `main()` can catch a Ctrl-C, and typer, rich and
# pydantic take most of a second to import. `main()` imports them inside its handler. (mypy takes any
# TYPE_CHECKING as true.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    import typer

AREAS = ("bench", "simulate", "scenario", "agent", "manifests", "control", "kube", "gpu_models", "data")
"""The modules of `gpufleet.cli` that register commands, in the order help lists them."""
SOLE_AREAS = ("bench", "simulate", "scenario", "kube", "manifests", "agent", "data")
"""The areas that register one command or group only, named as the area is."""


def build_app(areas: tuple[str, ...] = AREAS) -> typer.Typer:
    """The typer app with the commands of these areas."""
    import typer

    built = typer.Typer(
        rich_markup_mode=None,
        name="gpufleet",
        help="GPU fleet orchestration: queues, quotas, gang and topology-aware placement, GPU sharing.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )

    def root(
        version: bool = typer.Option(
            False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ) -> None:
        """GPU fleet orchestration: queues, quotas, gang and topology-aware placement, GPU sharing."""

    built.callback()(root)
    _values_named_not_typed()
    import importlib

    for area in areas:
        importlib.import_module(f"gpufleet.cli.{area}").register(built)
    return built


def _values_named_not_typed() -> None:
    """Help names what a value is (`--port PORT`, `KIND`), never its Python type (`<int>`, `<str>`),
    which typer shows by default: an option says its metavar, or its name in capitals; an argument's
    name (or metavar) is all it needs."""
    from typer import core

    if not hasattr(core.TyperOption, "display_type_rich"):  # a typer that never showed types
        return

    def option_value(self: Any, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        if self.metavar is not None:
            return str(self.metavar)
        value = str(self.name or "value").upper()
        return f"{value}..." if self.nargs != 1 else value

    setattr(core.TyperOption, "display_type_rich", option_value)  # noqa: B010 (mypy: a method)
    setattr(core.TyperArgument, "display_type_rich", lambda self, ctx: None)  # noqa: B010


def _print_version(value: bool) -> None:
    if value:
        import typer

        from gpufleet import __version__

        sys.stdout.write(f"gpufleet {__version__}\n")
        raise typer.Exit()


def _areas_for(argv: list[str]) -> tuple[str, ...]:
    first = argv[1] if len(argv) > 1 else ""
    return (first,) if first in SOLE_AREAS else AREAS


_app: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    """`app`, every area's commands (what tests and other callers import), built on first use."""
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        _app = build_app()
    return _app


def main() -> None:
    """Entry point: user errors print as one line and exit 2, never as a traceback; Ctrl-C at any
    moment, the imports included, exits 130 without one."""
    import signal

    # While the modules are imported and the app is built nothing needs cleaning up, so Ctrl-C ends
    # the process at once: a KeyboardInterrupt raised there can surface as another error (pydantic
    # turns one raised while it builds a model's validator into a SchemaError) with a traceback.
    signal.signal(signal.SIGINT, _exit_interrupted)
    atexit.unregister(_leave_heap_to_exit)  # once, however often a test calls main()
    atexit.register(_leave_heap_to_exit)
    try:
        _run()
    except KeyboardInterrupt:
        sys.exit(130)


def _leave_heap_to_exit() -> None:
    """At exit (after the handlers registered later): what the command built stays out of the cyclic
    collector's reach, so the interpreter's last collection does not walk and free it object by object
    (a simulated world of hundreds of thousands of objects held in cycles: 1 to 4 seconds of
    `gpufleet simulate`'s wall time). The operating system takes the memory back at once."""
    import gc

    gc.freeze()


def _exit_interrupted(signum: int, frame: object) -> None:
    os._exit(130)


def _interrupt_again(otherwise: Callable[[Any], object], unraisable: Any) -> None:
    """A Ctrl-C that lands in a weakref callback or a `__del__` cannot propagate: Python prints it as
    "Exception ignored" with a traceback and carries on. Deliver it once more instead, so it is raised
    in the command's own code and ends the command as any Ctrl-C does. It is delivered from another
    thread: delivered from here, the main thread would raise it inside this hook at once. Any other
    exception goes to the hook that was there before (`otherwise`)."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        otherwise(unraisable)
        return
    import _thread
    import contextlib

    # A RuntimeError: the interpreter is shutting down, so the command has ended anyway.
    with contextlib.suppress(RuntimeError):
        _thread.start_new_thread(_thread.interrupt_main, ())


def _run() -> None:
    import functools
    import signal

    import typer
    from rich.console import Console
    from rich.markup import escape

    from gpufleet.api.errors import GpuFleetError
    from gpufleet.api.gpu_models import load_extra_models

    try:
        # Configuration from the environment is read once, here, so every check of this process agrees.
        load_extra_models()
        app = build_app(_areas_for(sys.argv))
        # From here a command runs: Ctrl-C is a KeyboardInterrupt again, so its cleanup runs.
        sys.unraisablehook = functools.partial(_interrupt_again, sys.unraisablehook)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Outside standalone mode click returns a command's `typer.Exit(code)` instead of exiting.
        code = app(standalone_mode=False, prog_name="gpufleet")
    except GpuFleetError as exc:
        Console(stderr=True, emoji=False).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        sys.exit(_exit_code(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click's usage errors arrive here in standalone_mode=False
        if isinstance(exc, _click_errors()):
            usage: Any = exc  # both classes have show() and exit_code; they share no base that says so
            usage.show()
            sys.exit(usage.exit_code)
        raise
    if isinstance(code, int) and code:
        sys.exit(code)


def _exit_code(exc: Exception) -> int:
    """kubectl's exit codes: 1 for an operation that failed (not found, a conflict, a refused token, no
    server), 2 for what was asked wrongly (a bad option, file or field)."""
    from gpufleet.api.errors import ConflictError, GoneError, NotFoundError
    from gpufleet.cli.client import ApiError, AuthError, ServerUnreachableError

    failed = (NotFoundError, ConflictError, GoneError, ApiError, AuthError, ServerUnreachableError)
    return 1 if isinstance(exc, failed) else 2


def _click_errors() -> tuple[type[Exception], ...]:
    """The usage-error base classes in play: click's, and the copy of click that newer typer releases
    carry inside themselves (their parameter errors are not click's own class)."""
    import click

    errors: list[type[Exception]] = [click.ClickException]
    try:
        from typer._click.exceptions import ClickException as TyperClickException
    except ImportError:  # a typer that uses click itself
        pass
    else:
        errors.append(TyperClickException)
    return tuple(errors)


if __name__ == "__main__":
    main()
