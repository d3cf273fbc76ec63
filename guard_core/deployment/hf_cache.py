"""A model id -> its config.json in the local Hugging Face cache, offline only.

Where the cache is: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``. A
model lives in ``models--<org>--<name>/snapshots/<revision>/config.json``, the
revision named by ``refs/main`` (else the newest snapshot holding a
config.json). When ``huggingface_hub`` is installed its own cache lookup
(``try_to_load_from_cache``, which never touches the network) is asked first;
it is never required, and nothing here downloads.
"""

from __future__ import annotations

import os
import re

__all__ = ["cache_dirs", "find_config", "looks_like_model_id"]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def looks_like_model_id(text: str) -> bool:
    """'org/name' as the Hub spells repository ids (not a path that exists)."""
    return isinstance(text, str) and bool(_ID_RE.match(text)) and ".." not in text


def cache_dirs(environ=None) -> list[str]:
    """The hub cache directories to look in, most specific first."""
    env = os.environ if environ is None else environ
    out: list[str] = []
    if env.get("HF_HUB_CACHE"):
        out.append(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        out.append(os.path.join(env["HF_HOME"], "hub"))
    if env.get("XDG_CACHE_HOME"):
        out.append(os.path.join(env["XDG_CACHE_HOME"], "huggingface", "hub"))
    out.append(os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub"))
    seen, uniq = set(), []
    for d in out:
        if d not in seen:
            seen.add(d)
            uniq.append(d)
    # the first named location is where huggingface_hub itself looks; the
    # default layout is always tried too (a cache copied from elsewhere)
    return uniq


def _from_layout(cache: str, model_id: str) -> str | None:
    org, name = model_id.split("/", 1)
    repo = os.path.join(cache, f"models--{org}--{name}")
    snaps = os.path.join(repo, "snapshots")
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="utf-8") as fh:
            rev = fh.read(200).strip()
    except OSError:
        rev = ""
    if rev and re.fullmatch(r"[0-9a-zA-Z._-]{1,100}", rev):
        p = os.path.join(snaps, rev, "config.json")
        if os.path.isfile(p):
            return p
    try:
        entries = [os.path.join(snaps, e) for e in os.listdir(snaps)]
    except OSError:
        return None
    cands = [os.path.join(e, "config.json") for e in entries if os.path.isfile(os.path.join(e, "config.json"))]
    if not cands:
        return None
    return max(cands, key=lambda p: (os.path.getmtime(p), p))


def _from_hub(model_id: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache  # optional
    except Exception:
        return None
    try:
        p = try_to_load_from_cache(model_id, "config.json")
    except Exception:
        return None
    return p if isinstance(p, str) and os.path.isfile(p) else None


def find_config(model_id: str, environ=None, use_hub: bool = True) -> tuple[str | None, list[str]]:
    """(path of config.json or None, the places looked in)."""
    looked: list[str] = []
    if not looks_like_model_id(model_id):
        return None, looked
    if use_hub and environ is None:
        p = _from_hub(model_id)
        if p:
            return p, ["huggingface_hub cache"]
    for cache in cache_dirs(environ):
        looked.append(cache)
        p = _from_layout(cache, model_id)
        if p:
            return p, looked
    return None, looked
