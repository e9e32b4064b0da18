"""`gpufleet wait`: until objects meet a condition, as `kubectl wait` does.

`--for=condition=Succeeded` (status True; `condition=Admitted=False` for another status),
`--for=jsonpath={.status.phase}=Running` (a field's value; without `=VALUE`, until the field exists),
`--for=delete`. Every object named (or all of a kind, or those a selector matches) must meet it within
`--timeout`; each one that does is printed as kubectl prints it, and the command exits 1 on a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.cli.client import ResourceType
from gpufleet.cli.output import console

POLL_SECONDS = 0.5


def register(app: typer.Typer) -> None:
    app.command("wait")(wait)


Check = Callable[[dict[str, Any] | None], bool]
"""Whether an object (None: it does not exist) meets the condition."""


def parse_condition(text: str) -> tuple[Check, str]:
    """`--for`'s value as a check of an object and the words `wait` prints when it is met."""
    if text == "delete":
        return (lambda obj: obj is None), "deleted"
    kind, _, rest = text.partition("=")
    if kind == "condition" and rest:
        name, _, wanted = rest.partition("=")
        wanted = wanted or "True"

        def has_condition(obj: dict[str, Any] | None) -> bool:
            conditions = ((obj or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == name and str(c.get("status")) == wanted for c in conditions)

        return has_condition, f"condition met ({name}={wanted})"
    if kind == "jsonpath" and rest:
        from gpufleet.cli.jsonpath import compile_path

        # `{.status.phase}=Running`: the value follows the expression's closing brace
        value: str | None
        if rest.startswith("{"):
            end = rest.find("}")
            expression, after = rest[: end + 1], rest[end + 1 :]
            if end < 0 or (after and not after.startswith("=")):
                raise ValidationError(f"expected jsonpath={{.field}}=VALUE, got {text!r}", field="--for")
            value = after[1:] if after else None
        else:
            expression, _, found = rest.partition("=")
            value = found if "=" in rest else None
        path = compile_path(expression, option="--for")

        def matches(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                return False
            values = [match.value for match in path.find(obj)]
            return bool(values) if value is None else any(_text(v) == value for v in values)

        return matches, "condition met"
    raise ValidationError(
        f"expected delete, condition=NAME[=STATUS] or jsonpath={{.field}}[=VALUE], got {text!r}",
        field="--for",
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_timeout(text: str) -> float:
    """`30s`, `5m`, `1h`, `90` (seconds), as kubectl's --timeout takes them."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise ValidationError(
            f"expected a duration such as 30s, 5m or 1h, got {text!r}", field="--timeout"
        ) from None
    if seconds < 0:
        raise ValidationError(f"must not be negative, got {text!r}", field="--timeout")
    return seconds


def wait(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="Kind, plural or short name.")],
    names: Annotated[list[str] | None, typer.Argument(metavar="NAME", help="The objects' names.")] = None,
    condition: Annotated[
        str,
        typer.Option(
            "--for",
            metavar="CONDITION",
            help="delete, condition=NAME[=STATUS] (condition=Succeeded) or jsonpath={.FIELD}[=VALUE] "
            "(jsonpath={.status.phase}=Running).",
        ),
    ] = "",
    timeout: Annotated[
        str, typer.Option("--timeout", metavar="DURATION", help="How long to wait: 30s, 5m, 1h.")
    ] = "30s",
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", metavar="SELECTOR", help="The objects with these labels."),
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every object of KIND.")] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: default].")
    ] = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")] = False,
    server: Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")] = None,
    token: Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")] = None,
    state: Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")] = None,
) -> None:
    """Waits until objects meet a condition (a status condition, a field's value, or being deleted)."""
    from gpufleet.cli.control import connect, namespace_of

    if not condition:
        raise ValidationError(
            "say what to wait for: --for=condition=NAME, --for=jsonpath=... or --for=delete"
        )
    check, met = parse_condition(condition)
    seconds = parse_timeout(timeout)
    if bool(names) == bool(selector or everything):
        raise ValidationError("name the objects, or give -l SELECTOR or --all (one of them)", field="NAME")
    if names and all_namespaces:
        raise ValidationError("name one namespace (-n) to wait for objects by name, not -A", field="-A")
    client = connect(server, token, state)
    rtype = client.resource_type(kind)
    ns = namespace_of(namespace, all_namespaces) if rtype.namespaced else None
    targets: list[tuple[str, str | None]]
    if names:
        targets = [(name, ns) for name in names]
    else:
        listed = client.list_objects(rtype, ns, selector)
        targets = [(o["metadata"]["name"], o["metadata"].get("namespace")) for o in listed]
        if not targets:
            raise NotFoundError(f"no {rtype.plural} found" + (f" in namespace {ns}" if ns else ""))
    deadline = time.monotonic() + seconds
    out = console()
    for name, where in targets:
        while True:
            try:
                obj: dict[str, Any] | None = client.read(rtype, name, where)
            except NotFoundError:
                if condition != "delete":
                    raise
                obj = None
            if check(obj):
                out.print(f"{_ref(rtype, name)} {met}")
                break
            if time.monotonic() >= deadline:  # a failed operation: exit 1, as kubectl wait does
                console(stderr=True).print(
                    f"error: timed out waiting for the condition on {_ref(rtype, name)}"
                )
                raise typer.Exit(1)
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))


def _ref(rtype: ResourceType, name: str) -> str:
    return f"{rtype.singular}.gpufleet.io/{name}"
