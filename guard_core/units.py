"""Byte units and the ways the product writes a byte count: the ground floor.

Every guard_core module takes ``MIB``/``GIB`` from here. The three formatters print
differently on purpose (log lines and reports are asserted by the tests and read
by people); pick by what the line has always said:

- ``fmt_mib``: decisions, settings and log lines: ``"394 MiB"`` for a whole MiB,
  ``"513.5 MiB"`` otherwise, ``"-"`` for None.
- ``fmt_mib_gib``: the deterministic (fixed-split) advice, whose sizes reach many
  GiB: ``"12.0 GiB"`` from 10 GiB, else as ``fmt_mib``.
- ``fmt_size``: the plan report's allocation sizes, small ones included:
  ``"3.0 MiB"``, ``"12.5 KiB"``, ``"96 B"`` (always one decimal above a KiB).

Nothing here imports another module.
"""

from __future__ import annotations

__all__ = ["GIB", "KIB", "MIB", "fmt_mib", "fmt_mib_gib", "fmt_size", "nbytes"]

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def fmt_mib(n: int | None) -> str:
    """``"394 MiB"`` for a whole MiB, ``"513.5 MiB"`` otherwise, ``"-"`` for None."""
    if n is None:
        return "-"
    if n % MIB == 0:
        return f"{n // MIB} MiB"
    return f"{n / MIB:.1f} MiB"


def fmt_mib_gib(n: int) -> str:
    """``fmt_mib``, but ``"12.0 GiB"`` from 10 GiB up (the fixed-split sizes grow with the prompt)."""
    if n >= 10 * GIB:
        return f"{n / GIB:.1f} GiB"
    return fmt_mib(n)


def fmt_size(n: int) -> str:
    """One decimal in the largest unit that fits: ``"3.0 MiB"``, ``"12.5 KiB"``, ``"96 B"``."""
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= KIB:
        return f"{n / KIB:.1f} KiB"
    return f"{n} B"


def nbytes(buf) -> int:
    """Bytes held by a tensor-like buffer (``numel() * element_size()``; no torch import)."""
    return int(buf.numel() * buf.element_size())
