"""FlashInfer float-workspace sizing inside SGLang's FlashInferAttnBackend.

The wrapper around ``FlashInferAttnBackend.__init__``:

1. describes the backend's attention in framework-free terms from the model
   runner (heads per attention-TP rank, head dims, page size, KV dtype, whether
   decode runs on tensor cores - SGLang's own ``should_use_tensor_core`` -, the
   decode CUDA-graph batch sizes, speculative draft tokens, chunked prefill), plus
   the GPU (guard_core.gpus.detect_gpu) and the installed FlashInfer version;
2. asks guard_core which planners serve each phase (dispatch.choose_planners, fed
   with these facts) and for the need over them (dispatch.size_choice); a fact it
   cannot read is sized both ways, the larger need kept, and named in one warning;
3. runs SGLang's own ``__init__`` unchanged, except that while it runs the
   ``SGLANG_FLASHINFER_WORKSPACE_SIZE`` field answers ``get()`` with the decided
   size: SGLang's own ``.set(512 MiB)`` / ``.set(2 GiB)`` and a user's export still
   feed the decision as "what SGLang would allocate", we never shrink it. A
   cached per-process buffer smaller than the need is dropped first, so SGLang
   allocates a new one.

TRTLLMHAAttnBackend (a subclass with its own buffers, reading the env var before
``super().__init__``) and the MLA backends (other classes) are left alone.
Any exception in our part: one warning, SGLang's own behaviour.
"""

from __future__ import annotations

from guard_core.releases import NATIVE_VAR as _NATIVE_VARS
from guard_core.patching import PatchSet
from guard_core.workspace_decision import is_out_of_memory


NATIVE_VAR = _NATIVE_VARS["sglang"]
_SKIP_CLASSES = ("TRTLLMHAAttnBackend",)
_patches = PatchSet()  # FlashInferAttnBackend.__init__ and ModelRunner.load_model, undone by uninstall()
_user_size: list = []  # [int|None] once known: the user's export at process start
_reported: list = []  # a workspace line was logged in this process


def remember_user_size(environ) -> None:
    """Record the user's SGLANG_FLASHINFER_WORKSPACE_SIZE before SGLang's own .set()s."""
    if _user_size:
        return
    raw = environ.get(NATIVE_VAR)
    try:
        _user_size.append(int(raw) if raw is not None else None)
    except ValueError:
        _user_size.append(None)


def on_backend_module(module) -> None:
    from guard_core.patching import guarded

    from ._log import log

    guarded(log(), "workspace.patch", "workspace guard", _patch, module)


def _patch(module) -> None:
    from ._log import log

    cls = getattr(module, "FlashInferAttnBackend", None)
    if cls is None or not hasattr(module, "envs") or not hasattr(module.envs, NATIVE_VAR):
        from guard_core import releases
        from guard_core.versions import flashinfer_version

        log().missing_target("workspace", f"{module.__name__}.FlashInferAttnBackend (SGLANG_FLASHINFER_WORKSPACE_SIZE)",
                             releases.line_label("sglang"), needed=releases.workspace_guard_needed(flashinfer_version()))
        return
    _patches.wrap(cls, "__init__", lambda orig: _make_init(module, orig))
    # whatever the model might still miss: an overflowing plan() gets a buffer that fits
    from guard_core import safety_net

    if get_settings_workspace() != "off":
        safety_net.install(log())


def get_settings_workspace() -> str:
    from guard_core.settings import get_settings

    return get_settings().workspace


def uninstall() -> None:
    """Undo this module's patches and the safety net (the adapter's uninstall)."""
    from guard_core import safety_net

    _patches.undo()
    safety_net.uninstall()


def unpatch(module) -> bool:
    from guard_core.patching import unwrap_attr

    return unwrap_attr(module.FlashInferAttnBackend, "__init__")


def _applies(backend) -> bool:
    return not any(k.__name__ in _SKIP_CLASSES for k in type(backend).__mro__)


def _make_init(module, orig):
    def __init__(self, model_runner, *args, **kwargs):
        from guard_core.patching import guarded

        from ._log import log

        if not _applies(self):
            return orig(self, model_runner, *args, **kwargs)
        sizing = guarded(log(), "workspace.size", "workspace sizing", _Sizing.build, module, model_runner)
        if sizing is None:
            return orig(self, model_runner, *args, **kwargs)
        entered = guarded(log(), "workspace.apply", "workspace sizing", sizing.enter, default=False)
        try:
            return orig(self, model_runner, *args, **kwargs)
        except Exception as exc:
            if not (entered and is_out_of_memory(exc) and sizing.raised()):
                raise
            # the device cannot hold the decided size (e.g. FLASHINFER_GUARD_WORKSPACE=200GiB):
            # SGLang's own size, as without the guard, and one warning
            guarded(log(), "workspace.restore", "workspace sizing", sizing.exit)
            entered = False
            log().warning_once("workspace.oom", f"workspace: the device cannot hold "
                               f"{sizing.decision.allocate_bytes / (1 << 20):.0f} MiB ({type(exc).__name__}); "
                               "left to SGLang's own size")
            sizing.decision = None
            return orig(self, model_runner, *args, **kwargs)
        finally:
            if entered:
                guarded(log(), "workspace.restore", "workspace sizing", sizing.exit)
                guarded(log(), "workspace.report", "workspace sizing", sizing.report, self)

    return __init__


# ---------------------------------------------------------------- reading SGLang

def _attn_tp_size():
    """(attention TP size, decode-context-parallel size) of this rank."""
    try:  # SGLang >= 0.5.19: the runtime context
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        return int(par.attn_tp_size), int(getattr(par, "attn_dcp_size", 1) or 1)
    except Exception:
        pass
    from sglang.srt.layers.dp_attention import get_attention_tp_size

    return int(get_attention_tp_size()), 1


def _bag(name):
    """A resolved config bag of SGLang >= 0.5.19 (get_exec(), get_spec(), ...) or None."""
    try:
        import sglang.srt.runtime_context as rc

        return getattr(rc, "get_" + name)()
    except Exception:
        return None


def _first(*candidates):
    for c in candidates:
        if c is not None:
            return c
    return None


def _server_field(runner, name, bag=None):
    if bag is not None:
        b = _bag(bag)
        if b is not None:
            try:
                return getattr(b, name)
            except Exception:
                pass
    return getattr(getattr(runner, "server_args", None), name, None)


def _q_heads(mc) -> int:
    """Query heads SGLang plans with: the largest per-layer count where the config has one
    (0.5.23 plans get_max_num_attention_heads()), else num_attention_heads."""
    fn = getattr(mc, "get_max_num_attention_heads", None)
    if callable(fn):
        try:
            return int(fn())
        except Exception:
            pass
    return int(mc.num_attention_heads)


def _capture_sizes(runner, missing=None) -> tuple:
    """Decode CUDA-graph batch sizes SGLang captures (empty when CUDA graphs are off).

    When graphs are on but no size can be read, the largest batch SGLang could capture
    (its request pool) stands in, and the missing input is named."""
    if _server_field(runner, "disable_cuda_graph", "exec"):
        return ()
    sizes = None
    ex = _bag("exec")
    if ex is not None:
        try:
            sizes = list(ex.graph.cuda_graph_config.decode.bs)
        except Exception:
            sizes = None
    if sizes is None:
        sa = getattr(runner, "server_args", None)
        sizes = list(getattr(sa, "cuda_graph_bs", None) or [])
        if not sizes and getattr(sa, "cuda_graph_max_bs", None):
            sizes = [int(sa.cuda_graph_max_bs)]
    pool = getattr(getattr(runner, "req_to_token_pool", None), "size", None)
    if not sizes:
        if missing is not None:
            missing.append("CUDA-graph batch sizes")
        sizes = [int(pool)] if pool else [512]
    if pool:
        # SGLang captures its request pool's size where the list goes beyond it
        # (get_batch_sizes_to_capture), and nothing above
        if max(sizes) > pool:
            sizes.append(int(pool))
        sizes = [b for b in sizes if b <= pool]
    return tuple(sorted({int(b) for b in sizes}))


def _nested(bag, *path):
    obj = bag
    for name in path:
        obj = getattr(obj, name)
    return obj


def _deterministic(runner) -> bool:
    """--enable-deterministic-inference as the backend reads it: 0.5.2x
    ``get_exec().deterministic.enable_deterministic_inference`` (0.5.23
    flashinfer_backend.py:436-438), earlier ``server_args.enable_deterministic_inference``
    (0.5.5:168-170)."""
    ex = _bag("exec")
    if ex is not None:
        for path in (("deterministic", "enable_deterministic_inference"), ("enable_deterministic_inference",)):
            try:
                return bool(_nested(ex, *path))
            except Exception:
                pass
    return bool(getattr(getattr(runner, "server_args", None), "enable_deterministic_inference", False))


def _attention_backends(runner) -> set:
    """The attention backends the server resolved (0.5.2x ``get_exec().kernel``, else server_args)."""
    out = set()
    ex = _bag("exec")
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        v = None
        if ex is not None:
            for path in (("kernel", name), (name,)):
                try:
                    v = _nested(ex, *path)
                    break
                except Exception:
                    pass
        if v is None:
            v = getattr(getattr(runner, "server_args", None), name, None)
        if v:
            out.add(str(v))
    return out


# ------------------------------------------- deterministic inference: before the weights load

MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
_early_said: list = []  # the pre-check warned in this process


def on_model_runner_module(module) -> None:
    from guard_core.patching import guarded

    from ._log import log

    guarded(log(), "workspace.early.patch", "deterministic pre-check", _patch_runner, module)


def _patch_runner(module) -> None:
    from ._log import log

    cls = getattr(module, "ModelRunner", None)
    if cls is None or not callable(getattr(cls, "load_model", None)):
        log().debug("deterministic pre-check: ModelRunner.load_model not found; not applicable on this version",
                    key="workspace.early.missing")
        return
    _patches.wrap(cls, "load_model", _make_load_model)


def unpatch_runner(module) -> bool:
    from guard_core.patching import unwrap_attr

    cls = getattr(module, "ModelRunner", None)
    return bool(cls is not None and unwrap_attr(cls, "load_model"))


def _make_load_model(orig):
    def load_model(self, *args, **kwargs):
        from guard_core.patching import guarded

        from ._log import log

        guarded(log(), "workspace.early", "deterministic pre-check", early_fixed_split_check, self)
        return orig(self, *args, **kwargs)

    return load_model


def early_fixed_split_check(runner):
    """SGLang deterministic inference with FlashInfer, before ModelRunner.load_model: the
    need at the longest context against SGLang's forced 2 GiB; where it is not affordable,
    the one warning (need, buffer, longest prompt that fits, the settings that fit the
    full context). The KV pool does not exist yet: decode is sized for one full-context
    request plus one-token requests; the backend's own decision follows with the pool.
    Returns the assessment (or None where the mode or FlashInfer is not in play)."""
    import types

    from guard_core.fixed_split import SGLANG_FORCED_BYTES, assess, gpu_memory_bytes
    from guard_core.settings import get_settings

    from ._log import log

    if not _deterministic(runner):
        return None
    backends = _attention_backends(runner)
    if backends and "flashinfer" not in backends:
        return None
    settings = get_settings()
    if settings.workspace in ("off", "size"):
        return None
    # the mode forces tensor-core decode: SGLang's should_use_tensor_core is not consulted
    stub = types.SimpleNamespace(should_use_tensor_core=lambda **k: True,
                                 envs=types.SimpleNamespace(**{NATIVE_VAR: None}))
    sizing = _Sizing.build(stub, runner)
    if sizing is None or sizing.requirement is None or sizing.fixed_split is None:
        return None
    req = sizing.requirement
    a = assess(req.layout, sizing.fixed_split["limits"], sizing.gpu, sizing.fi_version, req.planners, "sglang",
               server_bytes=SGLANG_FORCED_BYTES, settings=settings, requirement=req,
               gpu_memory=gpu_memory_bytes(sizing.gpu, getattr(runner, "device", None)))
    if not a.affordable:
        _early_said.append(a.text)
        log().warning_once("workspace.fixed_split.early", f"workspace: before loading weights: {a.text}")
    return a


def _fixed_split_limits(limits, runner):
    """Deterministic inference (every line 0.5.5-0.5.23, flashinfer_backend.py 0.5.5:168-183,
    0.5.23:436-451): eager prefill/decode plan with SGLang's split tile sizes, read from the
    environment as its get_int_env_var does; CUDA graphs with disable_split_kv; the KV of one
    decode batch bounded by the pool (max_total_num_tokens; the radix cache is off with
    FlashInfer in this mode, 0.5.5 server_args.py:1830-1837)."""
    import os
    from dataclasses import replace

    from guard_core.fixed_split import split_sizes_from_env

    prefill, decode, notes = split_sizes_from_env(os.environ)
    pool = getattr(runner, "max_total_num_tokens", None)
    try:
        pool = int(pool) if pool and int(pool) > 0 else None
    except (TypeError, ValueError):
        pool = None
    limits = replace(limits, fixed_split_prefill=prefill, fixed_split_decode=decode, disable_graph_kv_split=True,
                     kv_pool_tokens=pool)
    return limits, {"notes": notes}


def _read_layout(module, runner, missing):
    """(AttentionLayout, KV dtype, KV widths to size when unknown, tensor-core decode) of this rank."""
    from guard_core.planner_choice import dtype_bytes, dtype_kind
    from guard_core.sizing import AttentionLayout

    mc = runner.model_config
    tp, dcp = _attn_tp_size()
    q_heads = _q_heads(mc) // tp
    try:
        kv_heads = mc.get_num_kv_heads(tp, dcp) if dcp > 1 else mc.get_num_kv_heads(tp)
    except TypeError:
        kv_heads = mc.get_num_kv_heads(tp)
    head_dim = int(mc.head_dim)
    v_head_dim = int(getattr(mc, "v_head_dim", None) or head_dim)
    page = int(_first(getattr(runner, "page_size", None), _server_field(runner, "page_size"), 1) or 1)
    # the KV dtype FlashInfer sees: SGLang's runner dtype (FP8 KV is 1 byte; with an
    # unknown dtype both widths are sized and the larger need kept)
    kv_dtype = getattr(runner, "kv_cache_dtype", None)
    kv_bytes = dtype_bytes(dtype_kind(kv_dtype))
    kv_options = None
    if kv_bytes is None:  # named by choose_planners
        kv_bytes, kv_options = 2, (1, 2)
    layout = AttentionLayout(int(q_heads), int(kv_heads), head_dim, v_head_dim, page, int(kv_bytes))
    # SGLang's own tensor-core decision (its should_use_tensor_core), as its backend takes it
    try:
        tc = bool(module.should_use_tensor_core(kv_cache_dtype=kv_dtype, num_attention_heads=q_heads,
                                                num_kv_heads=kv_heads))
    except Exception:
        tc = None
        missing.append("should_use_tensor_core")
    if _deterministic(runner):
        tc = True
    return layout, kv_dtype, kv_options, tc


def _read_limits(runner, missing):
    """(ServingLimits, fixed-split notes or None) of this runner: capture sizes, requests,
    chunked prefill, speculative verify / draft decode, deterministic inference."""
    from guard_core.sizing import ServingLimits

    from ._log import log

    mc = runner.model_config
    captures = _capture_sizes(runner, missing)
    pool = getattr(getattr(runner, "req_to_token_pool", None), "size", None)
    max_seqs = int(_first(_server_field(runner, "max_running_requests", "schedule"), pool, 256))
    chunk = _server_field(runner, "chunked_prefill_size", "schedule")
    if not chunk or chunk <= 0:
        chunk = _first(_server_field(runner, "max_prefill_tokens", "schedule"), 16384)
    spec = _server_field(runner, "speculative_algorithm", "spec")
    draft_runner = bool(getattr(runner, "is_draft_worker", False))
    verify_q, per_seq = _speculative(runner, spec, draft_runner, missing)
    limits = ServingLimits(capture_sizes=captures, max_num_seqs=max_seqs,
                           max_num_batched_tokens=int(chunk),
                           draft_tokens=max(0, (verify_q or 1) - 1), verify_q_len=verify_q, eager=True,
                           max_model_len=getattr(mc, "context_len", None),
                           decode_requests_per_seq=per_seq,
                           # the target captures TARGET_VERIFY graphs only when speculating
                           # (cuda_graph_runner.py 0.5.5:263-277: capture_forward_mode = TARGET_VERIFY)
                           one_token_graphs=not (spec and not draft_runner))
    fixed = None
    if _deterministic(runner):
        limits, fixed = _fixed_split_limits(limits, runner)
        for note in fixed["notes"]:
            log().warning_once("workspace.split:" + note[:60], f"workspace: deterministic inference: {note}")
    return limits, fixed


def _speculative(runner, spec, draft_runner, missing):
    """(verify query length or None, decode requests per sequence)."""
    # speculative verify: SGLang's speculative_num_draft_tokens already counts the
    # verified (bonus) token; a verify request holds exactly that many query tokens
    if spec and draft_runner:
        # the draft model's runner: its multi-step draft backends decode topk x bs requests
        # per step (FlashInferMultiStepDraftBackend.common_template, flashinfer_backend.py
        # 0.5.5:1446, 0.5.23:2501 ``bs = self.topk * num_seqs``); it verifies nothing
        topk = _server_field(runner, "speculative_eagle_topk", "spec")
        try:
            return None, max(1, int(topk or 1))
        except (TypeError, ValueError):
            return None, 1
    if spec:
        verify_q = int(_server_field(runner, "speculative_num_draft_tokens", "spec") or 0) or None
        if verify_q is None:
            missing.append("speculative_num_draft_tokens")
        return verify_q, 1
    return None, 1


class _Sizing:
    """The need for one backend, and the temporary override of the env field."""

    def __init__(self, module, runner, requirement, layout, gpu, fi_version, decode_tc):
        self.module = module
        self.runner = runner
        self.requirement = requirement
        self.layout = layout
        self.gpu = gpu
        self.fi_version = fi_version
        self.decode_tc = decode_tc
        self.field = getattr(module.envs, NATIVE_VAR)
        self.decision = None
        self.from_cache = False
        self._had_get = None
        self.facts = None  # guard_core.workspace_decision.WorkspaceFacts
        self.computed = None  # its WorkspaceNeed (None with workspace off)

    @classmethod
    def build(cls, module, runner):
        from guard_core import workspace_decision
        from guard_core.planner_choice import PlannerFacts
        from guard_core.gpus import detect_gpu
        from guard_core.settings import get_settings
        from guard_core.versions import flashinfer_version

        from ._log import log

        settings = get_settings()
        fi = flashinfer_version()
        if fi is None:
            log().info_once("workspace.nofi", "workspace: FlashInfer is not installed; nothing to size")
            return None
        missing: list[str] = []
        layout, kv_dtype, kv_options, tc = _read_layout(module, runner, missing)
        limits, fixed = _read_limits(runner, missing)
        gpu = detect_gpu(getattr(runner, "device", None))
        if gpu is None:
            log().info_once("workspace.nogpu", "workspace: no CUDA GPU visible to this process; nothing to size")
            return None
        facts = workspace_decision.WorkspaceFacts(
            "sglang", fi, gpu, layout, limits,
            PlannerFacts(framework="sglang", cc=tuple(gpu.cc), kv_dtype=None if kv_dtype is None else str(kv_dtype),
                         tensor_core_decode=tc),
            kv_options, tuple(missing))
        computed = None
        if settings.workspace != "off":
            computed = workspace_decision.need(facts)
            for key, text in computed.warnings:
                log().warning_once(key, text)
        sizing = cls(module, runner, computed.requirement if computed else None, layout, gpu, fi, tc)
        sizing.facts, sizing.computed = facts, computed
        if fixed is not None:
            sizing.fixed_split = dict(fixed, limits=limits)
        return sizing

    # -- the cached per-process buffer
    def _cached(self):
        m = self.module
        if hasattr(m, "global_workspace_buffer"):  # SGLang <= 0.5.15
            return m.global_workspace_buffer, "module"
        if hasattr(m, "get_buffer"):  # SGLang >= 0.5.19
            try:
                from sglang.srt.runtime_context import get_context

                return get_context().resources.buffers.get("flashinfer_workspace"), "context"
            except Exception:
                return None, None
        return None, None

    def _drop_cached(self, where):
        if where == "module":
            self.module.global_workspace_buffer = None
        elif where == "context":
            from sglang.srt.runtime_context import get_context

            get_context().resources.buffers.pop("flashinfer_workspace", None)

    fixed_split = None  # deterministic inference: {"limits", "notes"} (see _fixed_split_limits)

    def _decide(self, server_bytes):
        from guard_core import workspace_decision
        from guard_core.settings import get_settings

        user = _user_size[0] if _user_size else None
        user = user if (user is not None and user == server_bytes) else None
        settings = get_settings()
        if self.fixed_split is not None and self.requirement is not None:
            return self._decide_fixed_split(int(server_bytes), settings)
        return workspace_decision.decide(self.facts, server_bytes=int(server_bytes), user_bytes=user,
                                         settings=settings, computed=self.computed).decision

    def _decide_fixed_split(self, server_bytes, settings):
        """Deterministic inference: the need when affordable (over SGLang's forced 2 GiB),
        else the affordable buffer and one warning with the longest prompt that fits."""
        from guard_core.decisions import decide_fixed_split_workspace
        from guard_core.fixed_split import assess, gpu_memory_bytes

        cache = self.fixed_split.setdefault("assessed", {})
        a = cache.get(server_bytes)
        if a is None:
            req = self.requirement
            a = assess(req.layout, self.fixed_split["limits"], self.gpu, self.fi_version, req.planners, "sglang",
                       server_bytes=server_bytes, settings=settings, requirement=req,
                       gpu_memory=gpu_memory_bytes(self.gpu, getattr(self.runner, "device", None)))
            cache[server_bytes] = a
        return decide_fixed_split_workspace(self.requirement, a, framework="sglang", server_bytes=server_bytes,
                                            settings=settings, flashinfer_version=self.fi_version)

    def enter(self) -> bool:
        cached, where = self._cached()
        if cached is not None:
            have = int(cached.numel() * cached.element_size())
            dec = self._decide(have)
            if dec.allocate_bytes > have:
                self._drop_cached(where)  # SGLang allocates again, through our get()
            else:
                self.decision = dec  # the cached buffer is big enough and kept
                self.from_cache = True
        field = self.field
        self._had_get = field.__dict__.get("get")
        server_get = type(field).get
        sizing = self

        def get(*a, **k):
            server = server_get(field, *a, **k)  # SGLang's own value: default, its .set(), the user's
            try:
                sizing.decision = sizing._decide(server)
                if sizing.decision.action == "exact":  # the user's choice: also below SGLang's size
                    return int(sizing.decision.allocate_bytes)
                return max(int(sizing.decision.allocate_bytes), int(server))
            except Exception:
                return server

        field.get = get
        return True

    def raised(self) -> bool:
        """Whether the size the guard answered is above SGLang's own."""
        dec = self.decision
        return dec is not None and dec.action in ("raise", "size") and int(dec.allocate_bytes) > 0

    def exit(self) -> None:
        field = self.field
        if self._had_get is not None:
            field.get = self._had_get
        else:
            field.__dict__.pop("get", None)

    def report(self, backend) -> None:
        from ._log import log

        dec = self.decision
        if dec is None:
            return
        buf = getattr(backend, "workspace_buffer", None)
        have = int(buf.numel() * buf.element_size()) if buf is not None else None
        if have is not None and dec.action in ("raise", "size", "exact") and have < dec.allocate_bytes:
            log().warning_once("workspace.short", f"workspace: SGLang allocated {have} bytes, below the decided "
                               f"{dec.allocate_bytes}; the guard could not apply its size here")
            return
        if self.from_cache and _reported:  # another backend of this process reusing the buffer we sized
            log().debug(f"workspace: reusing this process's buffer; {dec.text}", key="workspace.reuse")
            return
        _reported.append(True)
        if dec.action == "limit" and _early_said and dec.text.startswith(_early_said[-1]):
            # said once already, before the weights loaded: only what was applied, at info
            from dataclasses import replace

            dec = replace(dec, level="info", text=f"deterministic inference: {dec.allocate_bytes} bytes allocated, "
                                                  "the limit as stated before loading weights")
        log().decision(dec, key=f"workspace:{dec.action}:{dec.numbers.get('need_bytes')}:{dec.allocate_bytes}")
