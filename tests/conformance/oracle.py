"""Ground truth for the planner model: FlashInfer's own host planner code, compiled per release.

For each FlashInfer release this module

1. fetches the ``flashinfer-python`` wheel with ``pip download flashinfer-python==V --no-deps``
   and extracts only ``flashinfer/data/include/**`` (plus, where the wheel bundles it, the CCCL
   include trees ``flashinfer/data/cccl/{libcudacxx/include,cub,thrust}``, which the headers of
   newer releases need) into ``${FLASHINFER_GUARD_CACHE:-~/.cache/flashinfer-guard}/flashinfer/<V>/``;
   the wheel itself is deleted after extraction;
2. reads the release's ``attention/scheduler.cuh`` to learn its ``PrefillPlan`` signature and
   compiles ``harness.cu`` (this directory) against those headers with nvcc, host planners only,
   CUDA runtime stubbed (see the top of harness.cu); the binary is cached under
   ``<cache>/flashinfer/<V>/build/harness-<key>`` keyed by the harness source, the flags and the
   nvcc version;
3. runs any number of requests through one harness process (JSON lines in, JSON lines out).

No FlashInfer header or code is stored in this repository; everything comes from the wheel at
test time.

Public API::

    run_oracle(version, requests) -> list[dict]     # one reply per request, same order
    build(version) -> Path                          # fetch + build (cached), returns the binary
    build_many(versions) -> dict[str, Path]         # same, compiles in parallel processes
    signature_features(version) -> dict[str, bool]

Requests are ``{"id": str, "planner": "prefill"|"decode"|"sm90"|"mla", "params": {...}}`` (see
harness.cu for every parameter and its default). Replies are ``{"id", "ok": True, "float_bytes",
"int_bytes", "padded_batch_size", "cta_tile_q", "split_kv", "allocations": [{"name", "buffer",
"bytes", "align", "offset"}, ...]}`` or ``{"id", "ok": False, "error": str}``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS_SRC = HERE / "harness.cu"

RELEASES = ("0.5.0", "0.6.12", "0.6.14", "0.6.16", "0.7.0.post1", "0.7.2.post1", "0.7.4")
# ci/matrix.sh points the suite at one line's installed FlashInfer instead
# (FLASHINFER_GUARD_CONFORMANCE_RELEASES=0.6.6): the pins of the checked lines that
# the default run does not compile (guard_core.flashinfer.releases.FLASHINFER_MATRIX_CHECKED).
RELEASES_ENV = "FLASHINFER_GUARD_CONFORMANCE_RELEASES"
_RELEASE_RE = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(\.post[0-9]{1,3})?\Z", re.ASCII)


def selected_releases() -> tuple:
    """The releases this run compiles: ``RELEASES``, or the comma-separated list in
    $FLASHINFER_GUARD_CONFORMANCE_RELEASES (a bad entry is an error, never dropped)."""
    raw = os.environ.get(RELEASES_ENV, "").strip()
    if not raw:
        return RELEASES
    picked = tuple(v.strip() for v in raw.split(","))
    bad = [v for v in picked if not _RELEASE_RE.match(v)]
    if bad or len(picked) > 32:
        raise OracleError(f"{RELEASES_ENV}={raw!r}: want comma-separated FlashInfer releases "
                          "such as 0.6.6,0.7.1 (at most 32)")
    return tuple(dict.fromkeys(picked))

_INCLUDE_PREFIX = "flashinfer/data/include/"
_CCCL_PREFIXES = (
    "flashinfer/data/cccl/libcudacxx/include/",
    "flashinfer/data/cccl/cub/cub/",
    "flashinfer/data/cccl/thrust/thrust/",
)
_EXTRACT_MARK = ".extracted-v1"


class OracleError(RuntimeError):
    pass


def cache_root() -> Path:
    # the one home every ci/ script uses (ci/lib.sh FG_HOME), so that an empty
    # FLASHINFER_GUARD_HOME is an empty machine for the compiled planners too
    root = (os.environ.get("FLASHINFER_GUARD_CACHE") or os.environ.get("FLASHINFER_GUARD_HOME")
            or os.path.join(os.path.expanduser("~"), ".cache", "flashinfer-guard"))
    return Path(root)


def release_dir(version: str) -> Path:
    return cache_root() / "flashinfer" / version


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _nvcc() -> str:
    exe = os.environ.get("NVCC") or shutil.which("nvcc")
    if not exe:
        for cand in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
            if os.path.exists(cand):
                exe = cand
                break
    if not exe:
        raise OracleError("nvcc not found (set NVCC or put it on PATH); the oracle compiles "
                          "FlashInfer's host planner code with it")
    return exe


def fetch(version: str) -> Path:
    """Download + extract the release's headers (cached). Returns the release directory."""
    rdir = release_dir(version)
    mark = rdir / _EXTRACT_MARK
    if mark.exists():
        return rdir
    with _locked(rdir.parent / f".{version}.lock"):
        if mark.exists():
            return rdir
        if _copy_installed(version, rdir):
            return rdir
        with tempfile.TemporaryDirectory(prefix="fig-wheel-") as tmp:
            wheels = _local_wheels(version)
            if not wheels:
                cmd = [sys.executable, "-m", "pip", "download", f"flashinfer-python=={version}",
                       "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
                       "--quiet", "-d", tmp]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                wheels = list(Path(tmp).glob("flashinfer_python-*.whl"))
                if proc.returncode != 0 or not wheels:
                    raise OracleError(f"pip download flashinfer-python=={version} failed:\n"
                                      f"{proc.stdout}\n{proc.stderr}")
            staging = rdir.with_name(rdir.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            with zipfile.ZipFile(wheels[0]) as zf:
                for info in zf.infolist():
                    name = info.filename
                    if info.is_dir():
                        continue
                    if name.startswith(_INCLUDE_PREFIX):
                        rel = "include/" + name[len(_INCLUDE_PREFIX):]
                    elif name.startswith(_CCCL_PREFIXES):
                        rel = "cccl/" + name[len("flashinfer/data/cccl/"):]
                    else:
                        continue
                    if ".." in Path(rel).parts:
                        continue
                    dest = staging / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, open(dest, "wb") as dst:
                        shutil.copyfileobj(src, dst)
            if not (staging / "include/flashinfer/attention/scheduler.cuh").exists():
                raise OracleError(f"flashinfer-python {version}: no include/flashinfer/attention/"
                                  "scheduler.cuh in the wheel")
            (staging / _EXTRACT_MARK).write_text(wheels[0].name + "\n")
            shutil.rmtree(rdir, ignore_errors=True)
            staging.rename(rdir)
    return rdir


def _local_wheels(version: str) -> list:
    """A wheel already on disk: $FLASHINFER_GUARD_WHEEL_DIR/flashinfer_python-<V>-*.whl."""
    d = os.environ.get("FLASHINFER_GUARD_WHEEL_DIR")
    if not d:
        return []
    return sorted(Path(d).glob(f"flashinfer_python-{version}-*.whl"))


def _copy_installed(version: str, rdir: Path) -> bool:
    """Use the installed flashinfer-python's headers when it is exactly ``version`` (offline GPU
    machines). Reads package metadata only; never imports flashinfer."""
    try:
        from importlib import metadata

        dist = metadata.distribution("flashinfer-python")
    except Exception:  # noqa: BLE001
        return False
    if dist.version != version:
        return False
    base = Path(dist.locate_file("flashinfer")) / "data"
    if not (base / "include/flashinfer/attention/scheduler.cuh").exists():
        return False
    staging = rdir.with_name(rdir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copytree(base / "include", staging / "include")
    for sub in ("libcudacxx/include", "cub/cub", "thrust/thrust"):
        src = base / "cccl" / sub
        if src.is_dir():
            shutil.copytree(src, staging / "cccl" / sub)
    (staging / _EXTRACT_MARK).write_text(f"installed flashinfer-python {version}\n")
    shutil.rmtree(rdir, ignore_errors=True)
    staging.rename(rdir)
    return True


def _function_signature(text: str, name: str) -> str:
    m = re.search(r"inline\s+cudaError_t\s+" + re.escape(name) + r"\s*\(", text)
    if not m:
        raise OracleError(f"{name} not found in scheduler.cuh")
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1]


def signature_features(version: str) -> dict:
    """What this release's PrefillPlan takes (read from its scheduler.cuh)."""
    return features_of((fetch(version) / "include/flashinfer/attention/scheduler.cuh").read_text())


def features_of(text: str) -> dict:
    """What the PrefillPlan in this scheduler.cuh text takes."""
    sig = _function_signature(text, "PrefillPlan")
    params = {p.strip().split()[-1].lstrip("*&") for p in re.sub(r"//[^\n]*", "", sig).split(",")
              if p.strip()}
    params = {p.split("=")[0].strip() for p in params}
    sig90 = _function_signature(text, "PrefillSM90Plan")
    sig_mla = _function_signature(text, "MLAPlan") if "inline cudaError_t MLAPlan" in text else ""
    return {
        "num_colocated_ctas": "num_colocated_ctas" in params,
        "uniform_q_len": "uniform_q_len" in params,
        "fixed_uniform_q_len": "fixed_uniform_q_len" in params,
        "kv_dtype_bytes": "kv_dtype_bytes" in sig,
        "sm90_signature_known": "kv_len_arr_h" in sig90 and "staged" not in sig90,
        # FlashInfer's size-only planner behind the wrappers' workspace_size() (PR #3741)
        "workspace_size": "PrefillPlanWorkspaceSize" in text,
        # MLAPlan hands the int bytes to stage back (0.7.0+) instead of copying them itself
        "mla_plan": bool(sig_mla),
        "mla_staged": "staged_int_workspace_bytes" in sig_mla,
    }


def _flags(version: str, real_cuda: bool = False) -> list[str]:
    return flags_for(release_dir(version), signature_features(version), real_cuda, label=version)


def flags_for(rdir: Path, feats: dict, real_cuda: bool = False, label: str = "") -> list[str]:
    """nvcc flags for harness.cu against the headers under ``rdir`` (``include/`` and, where
    present, ``cccl/`` as extracted by fetch(), or an installed flashinfer's ``data/``)."""
    rdir = Path(rdir)
    if not feats["sm90_signature_known"]:
        raise OracleError(f"{label or rdir}: unexpected PrefillSM90Plan signature; update harness.cu")
    flags = ["-std=c++17", "-O1", "-w", "-Xcompiler", "-w"]
    macro = {"num_colocated_ctas": "FIG_HAS_COLOCATED", "uniform_q_len": "FIG_HAS_UNIFORM",
             "fixed_uniform_q_len": "FIG_HAS_FIXED_UNIFORM", "kv_dtype_bytes": "FIG_HAS_KV_DTYPE",
             "workspace_size": "FIG_HAS_WS_SIZE", "mla_plan": "FIG_HAS_MLA",
             "mla_staged": "FIG_MLA_STAGED"}
    for key, m in macro.items():
        if feats.get(key):
            flags.append(f"-D{m}")
    flags.append(f"-I{rdir / 'include'}")
    cccl = rdir / "cccl"
    if (cccl / "libcudacxx/include").is_dir():
        flags += [f"-I{cccl / 'libcudacxx/include'}", f"-I{cccl / 'cub'}", f"-I{cccl / 'thrust'}"]
        traits = cccl / "libcudacxx/include/cuda/__device/arch_traits.h"
        if traits.is_file() and "arch_traits_for" in traits.read_text():
            # NVIDIA's per-compute-capability limits, for the occupancy bound (harness.cu)
            flags.append("-DFIG_HAS_ARCH_TRAITS")
    if real_cuda:
        # Real CUDA runtime and the real decode kernel (its occupancy is asked of the driver).
        # Flags as FlashInfer's JIT (jit/cpp_ext.py) compiles batch_decode.
        flags += ["-DFIG_REAL_CUDA", f"-arch={_device_arch()}", "--expt-relaxed-constexpr"]
    else:
        # Host planners only; the one kernel symbol the decode planner takes the address of is an
        # empty stub, so a PTX-only device pass for a single virtual arch is enough.
        flags += ["-cudart", "none", "-arch=compute_80", "-code=compute_80"]
    return flags


def _device_arch() -> str:
    """sm_XY of the first visible GPU (for the real-CUDA build); FIG_CUDA_ARCH overrides."""
    if os.environ.get("FIG_CUDA_ARCH"):
        return os.environ["FIG_CUDA_ARCH"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60).stdout.split()
        major, minor = out[0].strip().split(".")
        return f"sm_{major}{minor}"
    except Exception as e:  # noqa: BLE001
        raise OracleError(f"cannot read the GPU's compute capability with nvidia-smi ({e}); "
                          "set FIG_CUDA_ARCH=sm_XY") from e


def _nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    except OSError as e:  # pragma: no cover
        raise OracleError(f"cannot run {nvcc}: {e}") from e


def build(version: str, real_cuda: bool = False, extra_flags: list[str] | None = None) -> Path:
    """Fetch headers and compile the harness for one release (cached). Returns the binary."""
    fetch(version)
    nvcc = _nvcc()
    flags = _flags(version, real_cuda) + list(extra_flags or [])
    key_src = HARNESS_SRC.read_bytes() + "\0".join(flags).encode() + _nvcc_version(nvcc).encode()
    key = hashlib.sha256(key_src).hexdigest()[:16]
    out = release_dir(version) / "build" / f"harness-{'real-' if real_cuda else ''}{key}"
    if out.exists():
        return out
    with _locked(out.with_suffix(".lock")):
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        cmd = [nvcc, *flags, "-o", str(tmp), str(HARNESS_SRC)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OracleError(f"building the FlashInfer {version} harness failed:\n"
                              f"{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
        tmp.rename(out)
        # Drop binaries of older harness sources for this release and kind.
        kind = "harness-real-" if real_cuda else "harness-"
        for old in out.parent.glob(kind + "*"):
            stem = old.name[len(kind):].split(".")[0]
            if old != out and len(stem) == 16 and all(c in "0123456789abcdef" for c in stem):
                with contextlib.suppress(OSError):
                    old.unlink()
    return out


def build_many(versions, real_cuda: bool = False, jobs: int | None = None) -> dict:
    """Fetch and compile several releases in parallel (nvcc runs as separate processes)."""
    versions = list(versions)
    jobs = jobs or max(2, min(len(versions), (os.cpu_count() or 2) + 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {v: ex.submit(build, v, real_cuda) for v in versions}
        return {v: f.result() for v, f in futs.items()}


_PATH_RE = re.compile(r"at \S*?/include/(flashinfer/[^\s:]+):(\d+)")


_HARNESS_RE = re.compile(r"Error in function '\w+' at \S*?harness\.cu:\d+: (Unsupported group_size)")


def _clean_error(msg: str) -> str:
    msg = _HARNESS_RE.sub(r"DISPATCH_GQA_GROUP_SIZE (FlashInfer's macro, as in csrc/"
                          r"batch_decode.cu's plan): \1", msg)
    return _PATH_RE.sub(r"at \1:\2", msg)


def run_binary(binary: Path, requests: list[dict], timeout: float = 900, each=None) -> list[dict]:
    """Every request through one harness process; ``each(reply)`` (optional) may shrink each
    parsed reply as it is read (a large reply list need not be held whole)."""
    payload = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in requests)
    proc = subprocess.run([str(binary)], input=payload, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise OracleError(f"harness {binary} exited {proc.returncode}: {proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if len(lines) != len(requests):
        raise OracleError(f"harness answered {len(lines)} lines for {len(requests)} requests; "
                          f"stderr: {proc.stderr[-4000:]}")
    out = []
    for req, ln in zip(requests, lines):
        rep = json.loads(ln)
        if rep.get("id") != req.get("id"):
            raise OracleError(f"harness reply out of order: {rep.get('id')} for {req.get('id')}")
        if not rep.get("ok"):
            rep["error"] = _clean_error(rep.get("error", ""))
            if rep["error"].startswith("HARNESS CROSS-CHECK FAILED"):
                raise OracleError(f"request {req.get('id')}: {rep['error']}")
        out.append(rep if each is None else each(rep))
    return out


def run_oracle(version: str, requests: list[dict], verify: bool = False, each=None) -> list[dict]:
    """Run requests through FlashInfer ``version``'s real planner code (one process)."""
    binary = build(version)
    if verify:
        requests = [dict(r, verify=True) for r in requests]
    return run_binary(binary, requests, each=each)


def _alloc_key(a: dict) -> tuple:
    return (a.get("name"), a.get("buffer"), a.get("bytes"), a.get("align"), a.get("offset"))


def compare_reply(ref: dict, got, ref_name: str = "FlashInfer", got_name: str = "model") -> list:
    """Differences that matter between two replies: ok/error-ness, float_bytes, int_bytes and the
    whole allocation list (name, buffer, bytes, align, offset, in order). [] when equal."""
    if not isinstance(got, dict):
        return [f"{got_name} returned {type(got).__name__}, not dict"]
    if bool(ref.get("ok")) != bool(got.get("ok")):
        return [f"ok: {ref_name} {ref.get('ok')} ({str(ref.get('error', ''))[:200]}) vs "
                f"{got_name} {got.get('ok')} ({str(got.get('error', ''))[:200]})"]
    if not ref.get("ok"):
        return []
    problems = []
    for key in ("float_bytes", "int_bytes"):
        if ref.get(key) != got.get(key):
            problems.append(f"{key}: {ref_name} {ref.get(key)} vs {got_name} {got.get(key)}")
    ra = [_alloc_key(a) for a in ref.get("allocations", [])]
    ga = [_alloc_key(a) for a in (got.get("allocations") or [])]
    if ra != ga:
        for i in range(max(len(ra), len(ga))):
            r = ra[i] if i < len(ra) else None
            g = ga[i] if i < len(ga) else None
            if r != g:
                problems.append(f"allocation #{i}: {ref_name} {r} vs {got_name} {g}")
                break
        if len(ra) != len(ga):
            problems.append(f"{len(ra)} allocations in {ref_name} vs {len(ga)} in {got_name}")
    if problems:
        extra = {k: (ref.get(k), got.get(k)) for k in ("padded_batch_size", "cta_tile_q",
                                                      "split_kv")}
        problems.append(f"({ref_name}, {got_name}) padded_batch_size/cta_tile_q/split_kv: {extra}")
    return problems


def describe_request(req: dict) -> str:
    def short(v):
        if isinstance(v, list) and len(v) > 8:
            return f"[{', '.join(map(str, v[:4]))}, ... {v[-1]}] (len {len(v)})"
        return v

    return json.dumps({"planner": req["planner"],
                       "params": {k: short(v) for k, v in req["params"].items()}})


if __name__ == "__main__":  # python -m tests.conformance.oracle VERSION < requests.jsonl
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version", nargs="+")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--real-cuda", action="store_true")
    args = ap.parse_args()
    bins = build_many(args.version, real_cuda=args.real_cuda)
    if args.build_only:
        for v, b in bins.items():
            print(v, b)
        sys.exit(0)
    reqs = [json.loads(ln) for ln in sys.stdin if ln.strip()]
    for rep in run_binary(bins[args.version[0]], reqs):
        print(json.dumps(rep))
