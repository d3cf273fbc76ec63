"""One patch table per adapter: rows applied and undone by one mechanism.

A row names the module whose import fires it, the post-import hook key, the
words that name the guard in the one warning if our code fails, and what it
patches:

- ``wraps``: ``Wrap`` entries, each a *dotted target* inside the module
  (``"FlashInferMetadataBuilder._get_workspace_buffer"``, ``"run_resolution_pipeline"``),
  resolved as wrapt's ``resolve_path`` does (each step by ``getattr``; the last
  attribute of a class found along its MRO and wrapped on the named class), an
  optional *feature check* (does this release have what the wrapper relies on),
  and the wrapper factory ``make(orig, module)``;
- ``apply(module)``: what a wrapper alone cannot say (a list entry, a module
  global replaced, caches to clear), run after the wraps.

A wrapped module-level function that other modules imported by name is
rebound there too (``Wrap(..., rebind=("vllm",))``: every module under those
prefixes that holds the original gets the wrapper, and undo gives it back); the
modules named in ``importers`` are scanned again when they are imported later,
while the wrap is on (the one rebinding mechanism).
A row may say when it is needed at all (``when(module)``: False applies nothing,
silently, e.g. on a host where the guard stands down) and that its optional
targets are alternatives across releases (``one_of``: at least one must be
there, else ``missing`` names the first).

A row is all or nothing: when a required target is missing or its feature check
fails, nothing of the row is applied and ``missing(target)`` says so once (the
adapter's ``GuardLog.missing_target``: a warning where the line needs the guard,
a debug line where it does not); when a wrapper factory, a rebind or ``apply``
raises, everything the row did so far (its wraps, rebinds and the undo steps its
``apply`` registered) is undone at once and the exception is the row's one
warning (``guarded``); the server goes on with its own behaviour. Every wrap goes
through the table's ``PatchSet``, and ``install()`` remembers the post-import
hooks it registered, so ``PatchTable.undo()`` (the adapter's ``uninstall()``) is
the only undo: every row newest first, and the hooks forgotten (a later
``install()`` patches again). An optional ``before`` runs first (e.g. saying
once that the line is outside the checked ones).

In the spirit of OpenTelemetry's ``BaseInstrumentor`` (a declared table, applied
and undone by one mechanism) and wrapt's ``resolve_path``/``apply_patch`` (a
patch target named as a dotted path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from guard_core.runtime.wrapping import PatchSet, forget_import_hook, guarded, rebind_everywhere, when_imported

__all__ = ["PatchRow", "PatchTable", "Wrap", "resolve_path"]


def resolve_path(module, path: str) -> tuple[object, str] | None:
    """``"A.B.name"`` inside ``module`` -> ``(module.A.B, "name")``, or None where a
    step or the attribute itself is missing. The attribute of a class may come
    from a base (``getattr`` follows the MRO); ``PatchSet.wrap`` then wraps it on
    the named class only."""
    parts = path.split(".")
    if not path or not all(parts):
        return None
    owner = module
    for step in parts[:-1]:
        owner = getattr(owner, step, None)
        if owner is None:
            return None
    if getattr(owner, parts[-1], None) is None:
        return None
    return owner, parts[-1]


@dataclass(frozen=True)
class Wrap:
    target: str  # dotted path inside the row's module: "Class.method" or "function"
    make: Callable[[Callable, Any], Callable]  # make(original, module) -> the wrapper
    feature: Callable[[Any, Any], bool] | None = None  # feature(owner, module): the release has what make relies on
    required: bool = True  # False: absent on some releases, skipped silently there
    rebind: tuple = ()  # module prefixes where by-name imports of a wrapped function are rebound
    importers: tuple = ()  # modules scanned again (the rebind) when imported after the wrap

    def resolve(self, module) -> tuple[object, str] | None:
        found = resolve_path(module, self.target)
        if found is None:
            return None
        if self.feature is not None and not self.feature(found[0], module):
            return None
        return found


@dataclass(frozen=True)
class PatchRow:
    module: str  # the module whose import fires the row
    key: str  # its post-import hook key (starts with the adapter's prefix)
    what: str  # names the guard in the warning after an internal error
    apply: Callable[[Any], None] | None = None  # apply(module), after the wraps
    error_key: str = "moe"  # once-key of that warning
    before: Callable[[], None] | None = None
    before_what: str | None = None  # ``what`` for ``before`` (default: ``what``)
    wraps: tuple[Wrap, ...] = ()
    missing: Callable[[str], None] | None = None  # missing(dotted target): said once
    when: Callable[[Any], bool] | None = None  # when(module): False -> the row is not needed here
    one_of: bool = False  # the optional wraps are alternatives: at least one must resolve


class PatchTable:
    """An adapter's rows, the ``PatchSet`` they wrap through, and the logger they
    report through (a factory: the log is reset on uninstall)."""

    def __init__(self, log: Callable[[], Any], patches: PatchSet | None = None):
        self._log = log
        self.patches = patches if patches is not None else PatchSet()
        self.rows: list[PatchRow] = []
        self._hooks: list[tuple[str, str]] = []  # (module, key) registered by install()
        self._rebound: dict[int, tuple] = {}  # id(Wrap) -> (original, wrapper, prefixes) while on

    def row(self, module: str, key: str, what: str, apply: Callable[[Any], None] | None = None,
            **extra) -> Callable[[Any], None]:
        """Declare a row; returns its hook (``hook(module)`` applies it now)."""
        r = PatchRow(module, key, what, apply, **extra)
        self.rows.append(r)
        return lambda mod: self.fire(r, mod)

    def fire(self, r: PatchRow, module) -> None:
        log = self._log()
        if r.before is not None:
            guarded(log, r.error_key, r.before_what or r.what, r.before)
        guarded(log, r.error_key, r.what, self._apply, r, module)

    def _apply(self, r: PatchRow, module) -> None:
        if r.when is not None and not r.when(module):
            return
        found = []
        for w in r.wraps:
            place = w.resolve(module)
            if place is None:
                if w.required:
                    return self._missing(r, module, w)
                continue
            found.append((w, place))
        if r.one_of and r.wraps and not found:
            return self._missing(r, module, r.wraps[0])
        mark = self.patches.mark()
        try:
            for w, (owner, name) in found:
                original = getattr(owner, name)
                if self.patches.wrap(owner, name, lambda orig, w=w: w.make(orig, module)) and w.rebind:
                    self._rebind(w, original, getattr(owner, name))
            if r.apply is not None:
                r.apply(module)
        except Exception:  # all or nothing: what this row did is undone, the caller warns once
            self.patches.undo_since(mark)
            raise

    @staticmethod
    def _missing(r: PatchRow, module, w: Wrap) -> None:
        if r.missing is not None:
            r.missing(f"{getattr(module, '__name__', r.module)}.{w.target}")

    def _rebind(self, w: Wrap, old, new) -> None:
        """By-name imports of ``old`` under ``w.rebind`` point at ``new`` (now, and when one
        of ``w.importers`` is imported later); undo points them back."""
        self._rebound[id(w)] = (old, new, w.rebind)
        for prefix in w.rebind:
            rebind_everywhere(old, new, prefix)

        def back():
            self._rebound.pop(id(w), None)
            for prefix in w.rebind:
                rebind_everywhere(new, old, prefix)

        self.patches.on_undo(back)

    def rebind_again(self, w: Wrap) -> None:
        """A module that may import ``w``'s function by name was imported: while the wrap is
        on, every holder of the original under ``w.rebind`` gets the wrapper."""
        found = self._rebound.get(id(w))
        if found is not None:
            old, new, prefixes = found
            for prefix in prefixes:
                rebind_everywhere(old, new, prefix)

    def targets(self) -> list[str]:
        """Every declared dotted target, ``module.path`` (what the adapter may patch)."""
        return [f"{r.module}.{w.target}" for r in self.rows for w in r.wraps]

    def install(self) -> None:
        """A post-import hook per row, and one per later importer of a rebound function
        (idempotent by key; run now for an imported module); ``undo`` forgets them."""
        for r in self.rows:
            self._register(r.module, r.key, _Hook(self, r))
            for w in r.wraps:
                for name in w.importers:
                    self._register(name, f"{r.key}.importer", _Rebind(self, r, w))

    def _register(self, module: str, key: str, hook) -> None:
        if (module, key) not in self._hooks:
            self._hooks.append((module, key))
        when_imported(module, hook, key=key)

    def undo(self) -> int:
        """The only undo (the adapter's uninstall): every row's patches, newest first, and
        the post-import hooks ``install`` registered. Returns the patch steps undone."""
        hooks, self._hooks = self._hooks, []
        for module, key in hooks:
            forget_import_hook(module, key)
        return self.patches.undo()


class _Hook:
    """A row's post-import callback (named, for the last-resort hook warning)."""

    def __init__(self, table: PatchTable, r: PatchRow):
        self.table, self.row = table, r
        self.__qualname__ = f"patch row {r.key}"

    def __call__(self, module) -> None:
        self.table.fire(self.row, module)


class _Rebind:
    """A later importer's post-import callback: the rebind of one wrap, again."""

    def __init__(self, table: PatchTable, r: PatchRow, w: Wrap):
        self.table, self.row, self.wrap = table, r, w
        self.__qualname__ = f"patch row {r.key} (rebind {w.target})"

    def __call__(self, module) -> None:
        guarded(self.table._log(), self.row.error_key, self.row.what, self.table.rebind_again, self.wrap)
