"""Checks a test environment proves itself with, run by its own python.

    python ci/check_env.py records [DIR...] # no two distributions write one file
    python ci/check_env.py smoke vllm       # the modules the tests import, import

``records``: every installed distribution's RECORD lists the files it wrote,
with their hashes. Two distributions listing the same path with different
content overwrite each other, and which one survives depends on install order
(cuda-python 12.6.2.post1 and cuda-bindings 13.x both write
``cuda/bindings/runtime*.so``). Identical files (namespace ``__init__.py``
shipped by several ``nvidia-*`` wheels) are harmless and allowed. On a clash it
prints one line naming both distributions and one shared path, and exits 1.

``smoke``: imports what the suites import, FlashInfer's Python package
included, so that a broken environment fails once, with its cause, instead of
as one failure per scenario.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib
import importlib.metadata as md
import os
import sys
import traceback


# Known shared files that nothing imports, each with the distributions allowed
# to share it. Everything else shared with different content is a clash.
ALLOWED = {
    # a stray top-level build script in the flashinfer-python and
    # torch-c-dlpack-ext wheels (their packaging's, not a module anyone imports)
    "build_backend.py": {"flashinfer-python", "flashinfer_python", "torch-c-dlpack-ext", "torch_c_dlpack_ext"},
}


# Overlays by design: the overlay distribution replaces files of its base
# (nvidia-cutlass-dsl's `[cu13]` extra puts CUDA 13 builds of the libraries the
# base ships for CUDA 12 at the same paths; vLLM 0.23 pins
# `nvidia-cutlass-dsl[cu13]==4.5.2`). Allowed only when the file on disk is the
# overlay's; ci/install_env.sh reinstalls overlays last so that it is.
OVERLAYS = {"nvidia-cutlass-dsl-libs-cu13": "nvidia-cutlass-dsl-libs-base"}


def _norm(name: str) -> str:
    return name.rsplit(" ", 1)[0].lower().replace("_", "-")


def _allowed(rel: str, a: str, b: str) -> bool:
    names = ALLOWED.get(rel.replace(os.sep, "/"))
    return bool(names) and a.rsplit(" ", 1)[0] in names and b.rsplit(" ", 1)[0] in names


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def _overlay_ok(path: str, a: tuple[str, str], b: tuple[str, str]) -> bool | None:
    """None: not an overlay pair; else whether the overlay's file is the one on disk."""
    for over, base in ((a, b), (b, a)):
        if OVERLAYS.get(_norm(over[0])) == _norm(base[0]):
            try:
                return bool(over[1]) and _file_digest(path) == over[1]
            except OSError:
                return False
    return None


def records(path: list[str] | None = None) -> int:
    owner: dict[str, tuple[str, str]] = {}
    clashes = []
    dists = list(md.distributions(path=path) if path is not None else md.distributions())
    for dist in dists:
        name = f"{dist.metadata['Name']} {dist.version}"
        text = dist.read_text("RECORD")
        if not text:
            continue
        base = os.path.realpath(str(dist.locate_file("")))
        for row in csv.reader(text.splitlines()):
            if not row or not row[0]:
                continue
            rel = row[0]
            if ".dist-info/" in rel or rel.endswith(".pyc"):
                continue
            path = os.path.normpath(os.path.join(base, rel))
            digest = row[1] if len(row) > 1 else ""
            prev = owner.get(path)
            if prev is None:
                owner[path] = (name, digest)
            elif prev[0] != name and (prev[1] != digest or not digest):
                rel_path = os.path.relpath(path, base)
                overlay = _overlay_ok(path, prev, (name, digest))
                if overlay is True or (overlay is None and _allowed(rel_path, prev[0], name)):
                    continue
                clashes.append((prev[0], name, rel_path))
    if clashes:
        a, b, path = clashes[0]
        more = f" (and {len(clashes) - 1} more shared files)" if len(clashes) > 1 else ""
        print(f"file clash: {a} and {b} both install {path}{more}")
        if any(_overlay_ok(os.devnull, (x, ""), (y, "")) is not None for x, y, _ in clashes[:1]):
            print("  (an overlay by design: the overlay's files must be the ones on disk; reinstall it last)")
        return 1
    print(f"records: {len(owner)} files from {len(dists)} distributions, no clash")
    return 0


SMOKE = {
    "core": ["pytest", "hypothesis"],
    "vllm": [
        "pytest", "torch", "flashinfer", "flashinfer.prefill", "flashinfer.decode",
        "vllm", "vllm.plugins", "vllm.engine.arg_utils", "vllm.utils.flashinfer",
        "vllm.v1.attention.backends.flashinfer",
    ],
    "sglang": [
        "pytest", "xdist", "torch", "flashinfer", "flashinfer.prefill", "flashinfer.decode",
        "sglang", "sglang.srt.server_args",
    ],
}


# Imported when their distribution is installed: where the 0.32/0.33 envs broke
# (nvidia_cutlass_dsl over a clobbered cuda.bindings.runtime).
OPTIONAL = {"nvidia-cutlass-dsl": ["cutlass", "cutlass.cutlass_dsl"], "flashinfer-python": ["flashinfer.fused_moe"]}


def smoke(framework: str) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    mods = list(SMOKE[framework])
    for dist, extra in OPTIONAL.items():
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            continue
        mods += extra
    if framework == "vllm":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    for mod in mods:
        try:
            importlib.import_module(mod)
        except BaseException as exc:  # noqa: BLE001 - report any import failure once
            traceback.print_exc()
            print(f"smoke: import {mod} failed: {type(exc).__name__}: {exc}")
            return 1
    versions = []
    for dist in ("torch", "flashinfer-python", "vllm", "sglang"):
        try:
            versions.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    print(f"smoke: {len(mods)} modules import ({', '.join(versions) or 'no framework'})")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["records"]:
        return records(argv[1:] or None)
    if len(argv) == 2 and argv[0] == "smoke" and argv[1] in SMOKE:
        return smoke(argv[1])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
