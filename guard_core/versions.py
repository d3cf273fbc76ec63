"""Installed versions and version comparison, without importing the packages.

``import flashinfer`` initialises CUDA, so versions are read from the installed
distribution metadata only.  Comparison follows PEP 440 closely enough for the
release lines we care about (``0.7.0.post1``, ``0.19.1rc1.dev231+g9dd5ee0``).
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["flashinfer_version", "installed_version", "is_version", "parse_version", "version_lt"]

_FLASHINFER_DISTS = ("flashinfer-python", "flashinfer_python", "flashinfer")

_PRE_RANK = {"a": -3, "alpha": -3, "b": -2, "beta": -2, "rc": -1, "c": -1, "pre": -1, "preview": -1}
_VERSION_RE = re.compile(
    r"^\s*v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:(?:-(?P<post_n1>\d+))|(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post_n2>\d*)))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$",
    re.IGNORECASE,
)


class InvalidVersion(ValueError):
    pass


@lru_cache(maxsize=256)
def parse_version(text: str) -> tuple:
    """A sort key for a PEP 440 version string (raises InvalidVersion)."""
    m = _VERSION_RE.match(str(text))
    if not m:
        raise InvalidVersion(f"not a version: {text!r}")
    release = tuple(int(p) for p in m.group("release").split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    epoch = int(m.group("epoch") or 0)
    pre_l, dev_n = m.group("pre_l"), m.group("dev_n")
    post = m.group("post_n1") or m.group("post_n2")
    has_post = m.group("post_n1") is not None or m.group("post_n2") is not None
    has_dev = dev_n is not None
    if pre_l:
        pre = (_PRE_RANK[pre_l.lower()], int(m.group("pre_n") or 0))
    elif has_dev and not has_post:
        pre = (-4, 0)  # X.devN sorts before X.aN
    else:
        pre = (0, 0)
    post_key = (1, int(post or 0)) if has_post else (0, 0)
    dev_key = (0, int(dev_n or 0)) if has_dev else (1, 0)
    return (epoch, release, pre, post_key, dev_key)


def is_version(text: str) -> bool:
    try:
        parse_version(text)
        return True
    except InvalidVersion:
        return False


def version_lt(a: str, b: str) -> bool:
    return parse_version(a) < parse_version(b)


def installed_version(dist: str) -> str | None:
    """Version of an installed distribution, or None; never imports it."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # broken metadata must not break the caller
        return None


def flashinfer_version() -> str | None:
    for dist in _FLASHINFER_DISTS:
        v = installed_version(dist)
        if v:
            return v
    return None
