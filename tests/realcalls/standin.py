"""FlashInfer's planner stand-in: the real host planner code of the INSTALLED flashinfer-python,
under the frameworks' real ``plan()`` calls, on a machine without a GPU.

    from tests.realcalls import standin
    rec = standin.install("NVIDIA L40S", 142, (8, 9))
    ...  # the framework's own code: builders, FlashInfer's Python wrappers, plan()
    rec.calls        # one dict per plan() call (see Recorder)

What is replaced, and only that (GPU kernels and device queries cannot run here):

- FlashInfer's compiled-module getters, ``flashinfer.prefill.get_batch_prefill_module`` (FA2 and
  FA3/SM90 backends) and ``flashinfer.decode.get_batch_decode_module`` (CUDA-core decode), in
  every module that holds them by name. The object they return has a ``plan(...)`` with the
  compiled module's signature for this release, read from the installed
  ``flashinfer/data/csrc/batch_prefill.cu``, ``batch_prefill_sm90.cu`` and ``batch_decode.cu``.
  It calls FlashInfer's own ``PrefillPlan`` / ``PrefillSM90Plan`` / ``DecodePlan`` from the
  installed ``flashinfer/data/include/flashinfer/attention/scheduler.cuh``, compiled for the host
  into a shared library (tests/conformance/harness.cu built with ``-DFIG_SHARED_LIB``; CUDA
  runtime stubbed: SM count, compute capability, shared-memory limits, occupancy, memcpy), against
  the byte sizes of the REAL workspace tensors the wrapper passes. When FlashInfer's allocator runs
  out of those bytes the call raises ``RuntimeError`` with FlashInfer's own message ("Buffer
  overflow when allocating memory for NAME with size S and alignment A, but only B bytes
  available in AlignedAllocator. ..."), as the compiled module does. The ``run`` functions (GPU
  kernels) raise.
- Device queries: ``flashinfer.utils.get_compute_capability`` (behind ``is_sm90a_supported`` and
  ``determine_attention_backend``), ``flashinfer.utils.get_device_sm_count``,
  ``torch.cuda.get_device_capability`` / ``get_device_properties`` / ``get_device_name`` report
  the scenario's GPU; ``guard_core.gpus.detect_gpu`` (the guard's own device seam) likewise.
- ``pin_memory=True`` in ``torch.empty`` is dropped (page-locking needs a CUDA driver), and
  ``torch.cuda.device(d)`` is a no-op for a CPU ``d`` (device selection).

Everything else is real: FlashInfer's Python wrappers and their backend choice, the framework's
builders. The library is cached under ``$FLASHINFER_GUARD_CACHE`` (default
``~/.cache/flashinfer-guard``) ``/realcalls/flashinfer-<version>/``, keyed by the FlashInfer
version, a hash of its headers, the harness source, the flags and nvcc's version.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.conformance import oracle  # noqa: E402  (reused: header features, nvcc flags)

MIB = 1 << 20


class StandinError(RuntimeError):
    pass


# ----------------------------------------------------------------------------------------------
# the installed FlashInfer and the library built from its headers


def installed_flashinfer() -> tuple[str, Path]:
    """(version, .../site-packages/flashinfer/data) of the installed flashinfer-python (metadata
    only; does not import flashinfer)."""
    from importlib import metadata

    dist = metadata.distribution("flashinfer-python")
    data = Path(dist.locate_file("flashinfer")) / "data"
    if not (data / "include/flashinfer/attention/scheduler.cuh").exists():
        raise StandinError(f"flashinfer-python {dist.version}: no {data}/include/flashinfer/attention/scheduler.cuh")
    return dist.version, data


def cache_dir() -> Path:
    return oracle.cache_root() / "realcalls"


def _headers_hash(data: Path) -> str:
    h = hashlib.sha256()
    root = data / "include" / "flashinfer"
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def build_library() -> Path:
    """Compile harness.cu as a shared library against the installed headers (cached)."""
    version, data = installed_flashinfer()
    text = (data / "include/flashinfer/attention/scheduler.cuh").read_text()
    feats = oracle.features_of(text)
    nvcc = oracle._nvcc()
    flags = oracle.flags_for(data, feats, label=f"flashinfer-python {version}") + [
        "-DFIG_SHARED_LIB", "-shared", "-Xcompiler", "-fPIC",
        # the CUDA runtime stubs must serve this library's own calls even where the process has
        # loaded the real libcudart (torch): bind its references to its own definitions
        "-Xlinker", "-Bsymbolic"]
    key_src = b"\0".join([version.encode(), _headers_hash(data).encode(), oracle.HARNESS_SRC.read_bytes(),
                          "\0".join(flags).encode(), oracle._nvcc_version(nvcc).encode()])
    key = hashlib.sha256(key_src).hexdigest()[:16]
    out = cache_dir() / f"flashinfer-{version}" / f"libfig-{key}.so"
    if out.exists():
        return out
    with oracle._locked(out.with_suffix(".lock")):
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        cmd = [nvcc, *flags, "-o", str(tmp), str(oracle.HARNESS_SRC)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StandinError(f"building the planner library for flashinfer-python {version} failed:\n"
                               f"{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
        tmp.rename(out)
        for old in out.parent.glob("libfig-*.so"):
            if old != out:
                try:
                    old.unlink()
                except OSError:
                    pass
    return out


class Planner:
    """FlashInfer's host planners in this process (ctypes over the shared library)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lib = ctypes.CDLL(str(self.path))
        self._lib.fig_request.restype = ctypes.c_char_p
        self._lib.fig_request.argtypes = [ctypes.c_char_p]
        self._lib.fig_init()
        self._lock = threading.Lock()

    def request(self, planner: str, params: dict) -> dict:
        line = json.dumps({"id": "c", "planner": planner, "params": params}, separators=(",", ":"))
        with self._lock:
            reply = json.loads(self._lib.fig_request(line.encode()).decode())
        if not reply.get("ok"):
            reply["error"] = oracle._clean_error(reply.get("error", ""))
            if reply["error"].startswith("HARNESS CROSS-CHECK FAILED"):
                raise StandinError(reply["error"])
        return reply


@functools.lru_cache(maxsize=1)
def planner() -> Planner:
    return Planner(build_library())


# ----------------------------------------------------------------------------------------------
# the compiled module's plan() signature, read from the installed csrc


def _params_of(text: str, func: str) -> list[tuple[str, str | None]]:
    """[(name, default or None)] of ``func``'s parameters in a csrc file."""
    m = re.search(r"\b" + re.escape(func) + r"\s*\(", text)
    if not m:
        raise StandinError(f"{func} not found")
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    body = re.sub(r"//[^\n]*", "", text[m.end():i - 1])
    out = []
    for part in body.split(","):
        part = part.strip()
        if not part or part.startswith("ADDITIONAL"):
            continue
        default = None
        if "=" in part:
            part, default = (x.strip() for x in part.split("=", 1))
        out.append((part.split()[-1].lstrip("*&"), default))
    return out


@functools.lru_cache(maxsize=1)
def plan_signatures() -> dict[str, list[tuple[str, str | None]]]:
    """The compiled modules' plan() parameters for the installed release, by planner kind."""
    _, data = installed_flashinfer()
    csrc = data / "csrc"
    return {
        "prefill": _params_of((csrc / "batch_prefill.cu").read_text(), "BatchPrefillWithKVCachePlan"),
        "sm90": _params_of((csrc / "batch_prefill_sm90.cu").read_text(), "BatchPrefillWithKVCacheSM90Plan"),
        "decode": _params_of((csrc / "batch_decode.cu").read_text(), "BatchDecodeWithPagedKVCachePlan"),
    }


@functools.lru_cache(maxsize=1)
def workspace_size_signature() -> list[tuple[str, str | None]] | None:
    """The FA2 module's workspace_size() parameters (csrc/batch_prefill.cu
    BatchPrefillWithKVCacheWorkspaceSize), None where this release has no size-only planner."""
    _, data = installed_flashinfer()
    text = (data / "csrc" / "batch_prefill.cu").read_text()
    if "BatchPrefillWithKVCacheWorkspaceSize" not in text:
        return None
    return _params_of(text, "BatchPrefillWithKVCacheWorkspaceSize")


def _bind(kind: str, args: tuple, kwargs: dict, sig=None) -> dict:
    sig = sig if sig is not None else plan_signatures()[kind]
    if len(args) > len(sig):
        raise TypeError(f"{kind} plan() takes {len(sig)} arguments in this release, got {len(args)}")
    bound = {}
    for (name, _default), val in zip(sig, args):
        bound[name] = val
    for name, default in sig[len(args):]:
        if name in kwargs:
            bound[name] = kwargs.pop(name)
        elif default is not None:
            bound[name] = {"true": True, "false": False}.get(default, default)
            try:
                bound[name] = int(bound[name])
            except (TypeError, ValueError):
                pass
        else:
            raise TypeError(f"{kind} plan(): missing argument {name!r}")
    if kwargs:
        raise TypeError(f"{kind} plan(): unexpected arguments {sorted(kwargs)}")
    return bound


def _nbytes(t) -> int:
    return int(t.numel() * t.element_size())


def _ints(t) -> list[int]:
    if t is None:
        return []
    if hasattr(t, "tolist"):
        return [int(x) for x in t.reshape(-1).tolist()]
    return [int(x) for x in t]


def _lens_summary(indptr: list[int]) -> dict:
    lens = [b - a for a, b in zip(indptr, indptr[1:])]
    if not lens:
        return {"n": 0}
    return {"n": len(lens), "sum": sum(lens), "min": min(lens), "max": max(lens)}


# ----------------------------------------------------------------------------------------------
# recording


class Recorder:
    """Every plan() call the stand-in served, in order.

    Each entry: ``wrapper`` (the FlashInfer wrapper class that called), ``backend`` (fa2 / fa3 /
    decode), ``planner`` (prefill = FA2 ``PrefillPlan``, sm90 = ``PrefillSM90Plan``, decode =
    CUDA-core ``DecodePlan``), ``batch_size``, ``total_num_rows``, ``qo`` / ``kv`` (per-request
    length summaries: query tokens, KV pages or tokens), heads, head dims, ``page_size``,
    ``cuda_graph``, ``causal``, ``window_left``, ``q_dtype`` / ``kv_dtype``,
    ``float_workspace_bytes`` / ``int_workspace_bytes`` (the real tensors), ``float_bytes`` /
    ``int_bytes`` (what FlashInfer's planner allocates, its need), ``allocations``,
    ``split_kv``, ``padded_batch_size``, ``cta_tile_q``, ``ok`` and ``error`` (FlashInfer's own
    text when the real buffer was too small), ``tag`` (set by the test with ``rec.tag``).
    """

    def __init__(self, gpu):
        self.gpu = gpu
        self.calls: list[dict] = []
        self.tag: str | None = None
        self.notes: list[str] = []

    def add(self, entry: dict) -> None:
        entry["seq"] = len(self.calls)
        entry["tag"] = self.tag
        self.calls.append(entry)

    @property
    def overflows(self) -> list[dict]:
        return [c for c in self.calls if not c["ok"]]

    def largest_need(self) -> int:
        return max((c["float_bytes"] for c in self.calls), default=0)

    def summary(self, allocations: bool = False) -> list[dict]:
        keys = ("seq", "tag", "wrapper", "backend", "planner", "batch_size", "total_num_rows", "qo", "kv",
                "num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo", "page_size", "cuda_graph",
                "q_dtype", "kv_dtype", "float_workspace_bytes", "int_workspace_bytes", "float_bytes",
                "int_bytes", "split_kv", "padded_batch_size", "cta_tile_q", "ok", "error")
        out = [{k: c.get(k) for k in keys} for c in self.calls]
        if allocations:
            for o, c in zip(out, self.calls):
                o["allocations"] = c.get("allocations")
        return out


# ----------------------------------------------------------------------------------------------
# the module stand-ins


_DTYPE_BYTES_FALLBACK = {"float8_e4m3fn": 1, "float8_e5m2": 1, "uint8": 1, "bfloat16": 2, "float16": 2}


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _dtype_bytes(dt) -> int:
    size = getattr(dt, "itemsize", None)
    if isinstance(size, int) and size > 0:
        return size
    return _DTYPE_BYTES_FALLBACK.get(_dtype_name(dt), 2)


def _calling_wrapper() -> str | None:
    f = sys._getframe(2)
    for _ in range(6):
        if f is None:
            return None
        obj = f.f_locals.get("self")
        if obj is not None and type(obj).__module__.startswith("flashinfer"):
            return type(obj).__name__
        f = f.f_back
    return None


class _StandinModule:
    """What a FlashInfer module getter returns: ``plan`` runs FlashInfer's host planner;
    ``run``/``ragged_run``/``paged_run`` are GPU kernels and raise."""

    def __init__(self, standin, kind: str, backend: str, module_args: tuple):
        self._standin, self._kind, self._backend, self._module_args = standin, kind, backend, module_args

    def plan(self, *args, **kwargs):
        return self._standin._plan(self, args, kwargs)

    @property
    def workspace_size(self):
        """The compiled module's size-only planner (FlashInfer >= 0.6.15, PR #3741), where the
        installed csrc has it: FA2's ``BatchPrefillWithKVCacheWorkspaceSize`` runs FlashInfer's own
        ``PrefillPlanWorkspaceSize`` in the planner library. FA3 modules have none (None, as the
        real module's getattr gives the wrapper); the CUDA-core decode module's is not stood in."""
        if self._kind == "sm90" or workspace_size_signature() is None:
            return None
        if self._kind == "decode":
            def not_stood_in(*a, **k):
                raise StandinError("flashinfer-guard planner stand-in: the CUDA-core decode module's workspace_size "
                                   "is not stood in (DecodePlanWorkspaceSize is a template over the kernel)")
            return not_stood_in
        return lambda *a, **k: self._standin._workspace_size(self, a, k)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def gpu_kernel(*a, **k):
            raise StandinError(f"flashinfer-guard planner stand-in: {self._backend} module .{name}() is a GPU "
                               "kernel and cannot run on this machine")

        return gpu_kernel


def _register_loaded(backend, args) -> None:
    """What FlashInfer's getter leaves behind once it has built and loaded a variant (issue 27:
    the SGLang adapter asks workspace_size() only for a loaded variant): its JitSpec in
    ``flashinfer.jit.core.jit_spec_registry`` under the name the FA2 getter gives its primary
    module (jit/attention/modules.py 0.7.2:174-185, 1164-1192), compiled. Stand-in: a record with
    that name and ``is_compiled`` True (nothing is compiled on a CPU). Releases without the
    registry or the name function: nothing."""
    try:
        from flashinfer.jit.attention import modules
        from flashinfer.jit.core import jit_spec_registry

        name = modules._get_batch_prefill_module_uri(modules.get_batch_prefill_uri(backend, *args), backend,
                                                     "equal", "full")
    except Exception:
        return
    jit_spec_registry.register(SimpleNamespace(name=name, is_compiled=True, stand_in=True))


class Standin:
    def __init__(self, gpu_name: str, num_sms: int, cc: tuple[int, int], kernel_occupancy=None):
        self.gpu = SimpleNamespace(name=gpu_name, num_sms=int(num_sms), cc=(int(cc[0]), int(cc[1])))
        self.kernel_occupancy = kernel_occupancy
        self.recorder = Recorder(self.gpu)
        self.planner = planner()
        self.version, _ = installed_flashinfer()
        plan_signatures()  # fail early if the csrc signatures cannot be read

    # -- the getters
    def get_batch_prefill_module(self, backend, *args):
        # every module FlashInfer is asked to load, by its cache key (FlashInfer's getter is
        # functools.cache'd on (backend, *args)): a module key nobody else asks for is a module
        # the server would never have loaded
        self.prefill_module_keys = getattr(self, "prefill_module_keys", [])
        self.prefill_module_keys.append(repr((backend,) + tuple(args)))
        self.getter_calls = getattr(self, "getter_calls", 0) + 1
        if backend == "fa2":
            _register_loaded(backend, args)
            return _StandinModule(self, "prefill", "fa2", args)
        if backend == "fa3":
            return _StandinModule(self, "sm90", "fa3", args)
        raise StandinError(f"flashinfer-guard planner stand-in: prefill backend {backend!r} is not stood in "
                           "(it plans nothing in the float workspace through scheduler.cuh)")

    def get_batch_decode_module(self, *args):
        return _StandinModule(self, "decode", "decode", args)

    # -- workspace_size(): FlashInfer's own size-only planner, nothing recorded
    def _workspace_size(self, module: _StandinModule, args: tuple, kwargs: dict):
        self.workspace_size_calls = getattr(self, "workspace_size_calls", 0) + 1
        b = _bind("prefill", args, dict(kwargs), sig=workspace_size_signature())
        margs = module._module_args
        kv_dt = margs[1] if len(margs) >= 2 else None
        params = {"num_sms": self.gpu.num_sms, "cc_major": self.gpu.cc[0], "cc_minor": self.gpu.cc[1],
                  "qo_indptr": _ints(b["qo_indptr"]), "kv_indptr": _ints(b["kv_indptr"]),
                  "kv_dtype_bytes": _dtype_bytes(kv_dt)}
        for name in ("total_num_rows", "batch_size", "num_qo_heads", "num_kv_heads", "page_size", "head_dim_qk",
                     "head_dim_vo", "window_left", "fixed_split_size", "num_colocated_ctas", "uniform_q_len"):
            if name in b:
                params[name] = int(b[name])
        for name in ("enable_cuda_graph", "disable_split_kv"):
            if name in b:
                params[name] = bool(b[name])
        reply = self.planner.request("prefill_workspace_size", params)
        if not reply.get("ok"):
            raise RuntimeError(reply.get("error"))
        return [int(reply["float_workspace_size"]), int(reply["int_workspace_size"])]

    # -- plan()
    def _occupancy(self, head_dim: int, group: int, kv_bytes: int) -> int:
        occ = self.kernel_occupancy
        if callable(occ):
            occ = occ(head_dim=head_dim, group=group, kv_dtype_bytes=kv_bytes)
        if occ is None:
            raise StandinError("flashinfer-guard planner stand-in: the CUDA-core decode planner asks the GPU for "
                               "its kernel's occupancy, which cannot be known here; pass kernel_occupancy= to "
                               "install()")
        return int(occ)

    def _plan(self, module: _StandinModule, args: tuple, kwargs: dict):
        kind = module._kind
        b = _bind(kind, args, dict(kwargs))
        margs = module._module_args
        q_dt, kv_dt = (margs[0], margs[1]) if len(margs) >= 2 else (None, None)
        fbytes, ibytes = _nbytes(b["float_workspace_buffer"]), _nbytes(b["int_workspace_buffer"])
        params = {"num_sms": self.gpu.num_sms, "cc_major": self.gpu.cc[0], "cc_minor": self.gpu.cc[1]}
        entry = {"wrapper": _calling_wrapper(), "backend": module._backend, "planner": kind,
                 "q_dtype": _dtype_name(q_dt), "kv_dtype": _dtype_name(kv_dt),
                 "float_workspace_bytes": fbytes, "int_workspace_bytes": ibytes}
        if kind in ("prefill", "sm90"):
            qo, kv = _ints(b["qo_indptr"]), _ints(b["kv_indptr"])
            params.update(qo_indptr=qo, kv_indptr=kv)
            for name in ("total_num_rows", "batch_size", "num_qo_heads", "num_kv_heads", "page_size",
                         "head_dim_qk", "head_dim_vo", "window_left", "fixed_split_size", "num_colocated_ctas",
                         "uniform_q_len"):
                if name in b:
                    params[name] = int(b[name])
            for name in ("enable_cuda_graph", "causal", "disable_split_kv", "fixed_uniform_q_len"):
                if name in b:
                    params[name] = bool(b[name])
            if kind == "sm90":
                params["kv_len_arr"] = _ints(b["kv_len_arr"])
            params["kv_dtype_bytes"] = _dtype_bytes(kv_dt)
            entry.update(qo=_lens_summary(qo), kv=_lens_summary(kv))
        else:
            indptr = _ints(b["indptr"])
            params.update(indptr=indptr, batch_size=int(b["batch_size"]), num_qo_heads=int(b["num_qo_heads"]),
                          num_kv_heads=int(b["num_kv_heads"]), page_size=int(b["page_size"]),
                          enable_cuda_graph=bool(b["enable_cuda_graph"]))
            hd = int(b.get("head_dim_qk", margs[4] if len(margs) > 4 else 128))
            params["head_dim"] = hd
            params["head_dim_qk"] = hd
            params["head_dim_vo"] = int(b.get("head_dim_vo", hd))
            if self.kernel_occupancy == "launch":
                # the planner's own occupancy query answered from the launch it asks about (FlashInfer's
                # kernel configuration: threads, dynamic shared memory) and the GPU's limits (harness.cu)
                from tests.realcalls import gpus as table

                params["blocks_per_sm"] = -1
                params.update(table.limits(self.gpu.cc))
            else:
                params["blocks_per_sm"] = self._occupancy(hd, params["num_qo_heads"] // max(1, params["num_kv_heads"]),
                                                          _dtype_bytes(kv_dt))
            entry.update(qo={"n": params["batch_size"], "sum": params["batch_size"], "min": 1, "max": 1},
                         kv=_lens_summary(indptr))
        for name in ("batch_size", "total_num_rows", "num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo",
                     "page_size", "causal", "window_left"):
            if name in params:
                entry[name] = params[name]
        entry["cuda_graph"] = bool(params.get("enable_cuda_graph"))
        # 1) FlashInfer's planner with room to spare: its whole allocation list (the need)
        need = self.planner.request(kind, params)
        # 2) against the real tensors' sizes: FlashInfer's own outcome there
        real = self.planner.request(kind, dict(params, float_workspace_bytes=fbytes, int_workspace_bytes=ibytes))
        if need.get("ok"):
            entry.update(float_bytes=need["float_bytes"], int_bytes=need["int_bytes"],
                         allocations=need["allocations"], split_kv=need.get("split_kv"),
                         padded_batch_size=need.get("padded_batch_size"), cta_tile_q=need.get("cta_tile_q"))
        else:
            entry.update(float_bytes=0, int_bytes=0, allocations=[], planner_error=need.get("error"))
        entry["ok"] = bool(real.get("ok"))
        entry["error"] = None if real.get("ok") else real.get("error")
        self.recorder.add(entry)
        if not real.get("ok"):
            raise RuntimeError(real["error"])
        return list(real.get("plan_info") or [])


# ----------------------------------------------------------------------------------------------
# installation


_installed: Standin | None = None


def _rebind(old, new, prefixes=("flashinfer", "vllm", "sglang")) -> int:
    """Point every module attribute that holds ``old`` (by identity) at ``new``."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(prefixes):
            continue
        d = getattr(mod, "__dict__", None)
        if not d:
            continue
        for k, v in list(d.items()):
            if v is old:
                setattr(mod, k, new)
                n += 1
    return n


def install(gpu_name: str, num_sms: int, cc: tuple[int, int], *, kernel_occupancy=None,
            guard_seam: bool = True) -> Recorder:
    """Replace FlashInfer's module getters and the device queries in this process (see the module
    docstring); returns the Recorder. Call once per process, before the framework plans."""
    global _installed
    if _installed is not None:
        raise StandinError("the planner stand-in is already installed in this process")
    import torch

    import flashinfer.decode as fdec
    import flashinfer.prefill as fpre
    import flashinfer.utils as futils

    s = Standin(gpu_name, num_sms, cc, kernel_occupancy)
    cc_t = s.gpu.cc

    _rebind(fpre.get_batch_prefill_module, s.get_batch_prefill_module)
    fpre.get_batch_prefill_module = s.get_batch_prefill_module
    _rebind(fdec.get_batch_decode_module, s.get_batch_decode_module)
    fdec.get_batch_decode_module = s.get_batch_decode_module

    def get_compute_capability(device=None):
        return cc_t

    def get_device_sm_count(device=None):
        return s.gpu.num_sms

    _rebind(futils.get_compute_capability, get_compute_capability)
    futils.get_compute_capability = get_compute_capability
    _rebind(futils.get_device_sm_count, get_device_sm_count)
    futils.get_device_sm_count = get_device_sm_count

    props = SimpleNamespace(name=gpu_name, multi_processor_count=s.gpu.num_sms, major=cc_t[0], minor=cc_t[1],
                            shared_memory_per_multiprocessor=None)
    torch.cuda.get_device_capability = lambda device=None: cc_t
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_name = lambda device=None: gpu_name

    real_device = torch.cuda.device

    class device:  # torch.cuda.device(d): selecting a CUDA device; a no-op for the CPU tensors here
        def __init__(self, dev):
            self._inner = None if getattr(torch.device(dev) if isinstance(dev, str) else dev, "type",
                                          "cuda") == "cpu" else real_device(dev)

        def __enter__(self):
            return self._inner.__enter__() if self._inner is not None else None

        def __exit__(self, *exc):
            return self._inner.__exit__(*exc) if self._inner is not None else False

    torch.cuda.device = device

    real_empty = torch.empty

    @functools.wraps(real_empty)
    def empty(*a, **k):
        if k.get("pin_memory"):
            k["pin_memory"] = False
        return real_empty(*a, **k)

    torch.empty = empty

    if guard_seam:
        try:
            from guard_core import gpus

            real_detect = gpus.detect_gpu

            def detect_gpu(device=None):
                """The guard's own device reader runs as it does on a GPU machine: only the two
                questions a CPU answers differently (is CUDA available, which device is current)
                are answered for the scenario GPU; the properties come from the stand-in above."""
                saved = torch.cuda.is_available, torch.cuda.current_device
                torch.cuda.is_available, torch.cuda.current_device = (lambda: True), (lambda: 0)
                try:
                    gpu = real_detect(None if getattr(device, "type", "cuda") != "cuda" else device)
                finally:
                    torch.cuda.is_available, torch.cuda.current_device = saved
                s.recorder.detect_gpu_calls = getattr(s.recorder, "detect_gpu_calls", 0) + 1
                return gpu

            gpus.detect_gpu = detect_gpu
        except ImportError:
            pass
    _installed = s
    return s.recorder


def installed() -> Standin | None:
    return _installed
