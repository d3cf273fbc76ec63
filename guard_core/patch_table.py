"""One patch table per adapter: rows applied by one helper.

Each row names the module whose import fires it, the post-import hook key, the
words that name the guard in the one warning if our code fails, and the
``apply(module)`` that finds its target by feature and wraps it through the
adapter's ``PatchSet`` (so ``PatchSet.undo`` undoes every row). An optional
``before`` runs first (e.g. saying once that the line is outside the checked
ones). Each call is ``guarded``: an exception is one warning and the server
goes on with its own behaviour. In the spirit of OpenTelemetry's
``BaseInstrumentor`` (a declared table, applied and undone by one mechanism).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .patching import guarded, when_imported

__all__ = ["PatchRow", "PatchTable"]


@dataclass(frozen=True)
class PatchRow:
    module: str  # the module whose import fires the row
    key: str  # its post-import hook key (starts with the adapter's prefix)
    what: str  # names the guard in the warning after an internal error
    apply: Callable[[Any], None]  # apply(module): find the target by feature, wrap it
    error_key: str = "moe"  # once-key of that warning
    before: Callable[[], None] | None = None
    before_what: str | None = None  # ``what`` for ``before`` (default: ``what``)


class PatchTable:
    """An adapter's rows and the logger they report through (a factory: the log is
    reset on uninstall)."""

    def __init__(self, log: Callable[[], Any]):
        self._log = log
        self.rows: list[PatchRow] = []

    def row(self, module: str, key: str, what: str, apply: Callable[[Any], None], **extra) -> Callable[[Any], None]:
        """Declare a row; returns its hook (``hook(module)`` applies it now)."""
        r = PatchRow(module, key, what, apply, **extra)
        self.rows.append(r)
        return lambda mod: self.fire(r, mod)

    def fire(self, r: PatchRow, module) -> None:
        log = self._log()
        if r.before is not None:
            guarded(log, r.error_key, r.before_what or r.what, r.before)
        guarded(log, r.error_key, r.what, r.apply, module)

    def install(self) -> None:
        """A post-import hook per row (idempotent by key; run now for an imported module)."""
        for r in self.rows:
            when_imported(r.module, _Hook(self, r), key=r.key)


class _Hook:
    """A row's post-import callback (named, for the last-resort hook warning)."""

    def __init__(self, table: PatchTable, r: PatchRow):
        self.table, self.row = table, r
        self.__qualname__ = f"patch row {r.key}"

    def __call__(self, module) -> None:
        self.table.fire(self.row, module)
