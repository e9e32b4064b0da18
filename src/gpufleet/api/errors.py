"""Errors a user can cause. Each names the object and the field so the fix is obvious."""

from __future__ import annotations


class GpuFleetError(Exception):
    """Base of every error caused by user input; the CLI prints it without a traceback."""

    def __init__(self, message: str, *, obj: str | None = None, field: str | None = None) -> None:
        self.obj = obj
        self.field = field
        where = ""
        if obj and field:
            where = f"{obj}: field {field}: "
        elif obj:
            where = f"{obj}: "
        elif field:
            where = f"field {field}: "
        super().__init__(where + message)
        self.detail = message

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled whole (a run of `simulate --compare` in another process sends its error back):
        # the default rebuilds from `args` alone, which loses the fields and breaks subclasses whose
        # constructor takes other arguments.
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[GpuFleetError], args: tuple[object, ...], state: dict[str, object]) -> GpuFleetError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class ValidationError(GpuFleetError):
    """An object or a field has a value that cannot be accepted."""


class QuantityError(ValidationError):
    """A quantity such as `500m` or `64Gi` cannot be parsed."""


class NotFoundError(GpuFleetError):
    """The named object does not exist."""


class ConflictError(GpuFleetError):
    """An update was based on a stale resourceVersion, or the object already exists."""


class DataError(GpuFleetError):
    """A trace or fleet file has a missing column, a bad number or an unknown value."""

    def __init__(self, message: str, *, path: str, line: int | None = None, field: str | None = None) -> None:
        obj = f"{path}:{line}" if line is not None else path
        super().__init__(message, obj=obj, field=field)
        self.path = path
        self.line = line


class GoneError(GpuFleetError):
    """A watch asked for changes after a resourceVersion whose events were compacted away.

    As with Kubernetes' 410 Gone, the client lists again and watches from the list's resourceVersion.
    """
