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

import csv
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


def _allowed(rel: str, a: str, b: str) -> bool:
    names = ALLOWED.get(rel.replace(os.sep, "/"))
    return bool(names) and a.rsplit(" ", 1)[0] in names and b.rsplit(" ", 1)[0] in names


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
                if not _allowed(rel_path, prev[0], name):
                    clashes.append((prev[0], name, rel_path))
    if clashes:
        a, b, path = clashes[0]
        more = f" (and {len(clashes) - 1} more shared files)" if len(clashes) > 1 else ""
        print(f"file clash: {a} and {b} both install {path}{more}")
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
