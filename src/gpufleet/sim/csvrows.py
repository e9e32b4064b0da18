"""Reading the rows of a CSV trace, with errors that name the file, the line and the column."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from gpufleet.api.errors import DataError


def csv_rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for every data row, after checking the header has the required columns."""
    where = str(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot read the file: {exc.strerror}", path=where) from exc
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise DataError("the file is empty; a header row is expected", path=where, line=1) from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DataError(f"unreadable header: {exc}", path=where, line=1) from exc
        missing = [c for c in required if c not in header]
        if missing:
            raise DataError(f"missing column(s) {', '.join(missing)}", path=where, line=1, field=missing[0])
        while True:
            try:
                values = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as exc:
                raise DataError(f"unreadable row: {exc}", path=where, line=reader.line_num) from exc
            line = reader.line_num
            if not values or all(not v.strip() for v in values):
                continue
            if len(values) < len(header):
                absent = header[len(values)]
                if absent in required:
                    raise DataError(
                        f"row has {len(values)} values, the header {len(header)}",
                        path=where,
                        line=line,
                        field=absent,
                    )
                values = values + [""] * (len(header) - len(values))
            elif len(values) > len(header) and any(v.strip() for v in values[len(header) :]):
                # A value without a column: most likely a comma inside a field, which shifts the rest.
                raise DataError(
                    f"row has {len(values)} values, the header {len(header)}", path=where, line=line
                )
            yield line, dict(zip(header, (v.strip() for v in values), strict=False))
