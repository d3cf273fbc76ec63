"""Published models' attention structure through vLLM's own model classes (issue 27 item 4).

The differential search's deployments name a config.json of the corpus
(tests/data/model_configs, tests/data/model_configs_published). Here vLLM itself builds that
model: ``ModelConfig`` reads the file, vLLM's model class (``initialize_model``) is built on
torch's ``meta`` device (shapes, no storage), every layer it builds registers itself in the
config's forward context, each attention layer gives its own KV-cache spec
(``get_kv_cache_spec``), and vLLM's own ``get_kv_cache_groups`` groups them (hybrid manager
on, as on CUDA: windows, chunked-local and Mamba layers in their own groups, page sizes
unified by vLLM). The FlashInfer groups are then built into metadata builders by the V2 model
runner's ``init_attn_backend`` (tests/vllm/realcalls_scenarios.py ``make_builders``). So
windows, sinks, soft-cap, per-layer shapes and hybrid layers are the model file's own.

What is faked, and why (each only while the model is built, nothing else):
- the tensor-parallel group reports ``tp`` ranks, this process being rank 0 (one process
  cannot hold ``tp`` ranks; the group is a real one-process gloo group otherwise);
- vLLM's platform: CUDA's answers where the CPU-less platform has none: the attention backend
  is FlashInfer (``--attention-backend FLASHINFER``), the hybrid KV-cache manager is supported,
  ``is_cpu`` is true while the model is built so the MoE layers pick a backend that exists
  without a GPU (MoE weights play no part in attention) and ``current_device`` is the CPU;
- the checkpoint's ``quantization_config`` is dropped (FP8/NVFP4/MXFP4 weight kernels need a
  GPU to be chosen; attention shapes and the KV-cache dtype, which is the deployment's
  ``--kv-cache-dtype``, do not depend on it).
MLA models are not built: vLLM decides MLA (``ModelConfig.use_mla``), and then
``mla_evidence`` shows that nothing is planned in the guarded buffer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
CORPUS_DIRS = (os.path.join(DATA, "model_configs"), os.path.join(DATA, "model_configs_published"))
FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"


def corpus_models() -> list[str]:
    """Every config of the two corpus folders (name without .json), sorted."""
    out = []
    for d in CORPUS_DIRS:
        out += [f[:-5] for f in os.listdir(d) if f.endswith(".json") and f not in ("sources.json", "manifest.json")]
    return sorted(set(out))


def config_dict(name: str) -> dict:
    for d in CORPUS_DIRS:
        p = os.path.join(d, name + ".json")
        if os.path.exists(p):
            with open(p) as f:
                cfg = json.load(f)
            break
    else:
        raise FileNotFoundError(name)
    for c in (cfg, cfg.get("text_config") or {}):
        c.pop("quantization_config", None)
    return cfg


def corpus_heads() -> list[tuple[str, int]]:
    """(name, total attention heads as the file states them, 0 if it does not) for the draw."""
    out = []
    for name in corpus_models():
        cfg = config_dict(name)
        tc = cfg.get("text_config") or cfg.get("llm_config") or cfg
        h = tc.get("num_attention_heads") or tc.get("n_head") or cfg.get("num_attention_heads") or 0
        out.append((name, int(h) if isinstance(h, int) else 0))
    return out


def hub_name(name: str) -> str:
    """The hub repository a corpus config comes from (sources.json / manifest.json), for the
    one-line reproduction; the file name where neither says."""
    for d, f in ((CORPUS_DIRS[0], "sources.json"), (CORPUS_DIRS[1], "manifest.json")):
        try:
            with open(os.path.join(d, f)) as fh:
                row = json.load(fh).get(name) or {}
        except OSError:
            continue
        if row.get("hf_id"):
            return row["hf_id"]
        src = row.get("source") or ""
        if src.startswith("https://huggingface.co/"):
            return "/".join(src.split("/")[3:5])
    return f"{name} (tests/data config)"


def platform_answers() -> None:
    """CUDA's answers on the CPU-less platform (see the module text); called once per process."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    cls.support_hybrid_kv_cache = classmethod(lambda c: True)
    cls.get_attn_backend_cls = classmethod(lambda c, *a, **k: FLASHINFER)


_DIST = {"ready": False}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def tp_ranks(vc, tp: int):
    """A one-process gloo group (made once), reporting ``tp`` ranks while inside."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    if not _DIST["ready"]:
        with set_current_vllm_config(vc):
            ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
            # with no model config, vLLM creates the expert-parallel group too ("Don't create EP
            # group for dense models", parallel_state.py 0.23.0:1852-1853): later MoE draws need it
            saved = vc.model_config
            object.__setattr__(vc, "model_config", None)
            try:
                ps.initialize_model_parallel(1, 1)
            finally:
                object.__setattr__(vc, "model_config", saved)
        _DIST["ready"] = True
    g = ps.get_tp_group()
    saved = g.world_size
    g.world_size = tp
    try:
        yield
    finally:
        g.world_size = saved


@contextlib.contextmanager
def _building():
    import torch
    from vllm.platforms import current_platform

    cls = type(current_platform)
    saved = {k: cls.__dict__.get(k) for k in ("is_cpu", "current_device")}
    cls.is_cpu = lambda self: True
    cls.current_device = lambda self: torch.device("cpu")
    # Stand-in for the GPU's speed at random weight init: vLLM's Transformers backend builds a
    # throwaway model to find its classes (models/transformers/base.py 0.33.0:244-260) whose
    # nn.Linear layers run kaiming_uniform_ on real CPU tensors: ~50 s per 7B model here, a few ms
    # on a GPU. Weights never reach the attention planner, so the initializers leave them as allocated.
    inits = [n for n in ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_",
                         "xavier_uniform_", "xavier_normal_", "orthogonal_") if hasattr(torch.nn.init, n)]
    saved_init = {n: getattr(torch.nn.init, n) for n in inits}
    for n in inits:
        setattr(torch.nn.init, n, lambda tensor, *a, **k: tensor)
    # Stand-in for vLLM's CUDA kernels: a layer built for a CUDA platform binds its kernel at
    # construction (vLLM 0.23.0 model_executor/layers/activation.py:339-347, GeluAndMul ->
    # torch.ops._C.gelu_and_mul), and this CPU wheel's vllm._C does not load (no libcuda), so every
    # gemma/zamba2/gpt2 build failed. An op missing from torch.ops._C is a placeholder that refuses to
    # run: nothing here runs a layer, and the attention planner never sees one.
    ns_cls = type(torch.ops._C)
    saved_getattr = ns_cls.__getattr__

    def _getattr(self, name):
        try:
            return saved_getattr(self, name)
        except AttributeError:
            if getattr(self, "name", None) != "_C" or name.startswith("__"):
                raise

            def kernel(*a, _name=name, **k):
                raise RuntimeError(f"torch.ops._C.{_name}: a CUDA kernel, not run on this CPU host")

            return kernel

    ns_cls.__getattr__ = _getattr
    try:
        yield
    finally:
        ns_cls.__getattr__ = saved_getattr
        for n, f in saved_init.items():
            setattr(torch.nn.init, n, f)
        for k, v in saved.items():
            if v is None:
                delattr(cls, k)
            else:
                setattr(cls, k, v)


def _build_drafter(vc, tp: int, initialize_model) -> None:
    """The EAGLE/EAGLE3 drafter as vLLM's proposer builds it (``_get_model``,
    ``v1/spec_decode/llm_base_proposer.py`` 0.33.0:1303-1316): its own draft config
    (``_create_draft_vllm_config``) and the draft model class vLLM resolved
    (``SpeculativeConfig.draft_model_config``), on ``meta``; its attention layers join the
    forward context next to the target's."""
    import importlib
    import types

    import torch
    from vllm.config import set_current_vllm_config

    proposer = None
    for mod in ("vllm.v1.spec_decode.llm_base_proposer", "vllm.v1.spec_decode.eagle"):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        proposer = next((v for v in vars(m).values() if isinstance(v, type) and "_create_draft_vllm_config" in vars(v)),
                        None)
        if proposer is not None:
            break
    sc = vc.speculative_config
    if proposer is None:
        raise RuntimeError("this vLLM has no proposer with _create_draft_vllm_config")
    dvc = proposer._create_draft_vllm_config(types.SimpleNamespace(speculative_config=sc, vllm_config=vc))
    with tp_ranks(vc, tp), set_current_vllm_config(dvc), _building(), torch.device("meta"):
        initialize_model(vllm_config=dvc, model_config=sc.draft_model_config)


def eagle_head_config(target, method: str) -> dict:
    """A draft head for ``target`` in the layout of the published EAGLE heads (one Llama decoder
    layer with the target's attention shape, e.g. yuhuili/EAGLE-LLaMA3.1-Instruct-8B; EAGLE3:
    ``LlamaForCausalLMEagle3`` with a draft vocabulary). Constructed, not published: named so.
    ``target``: the target's text config as vLLM resolved it (a transformers config: its
    attribute map reads gpt2's ``n_head`` as ``num_attention_heads``), or a config dict."""
    if isinstance(target, dict):
        tc = target.get("text_config") or target
        get = tc.get
    else:
        def get(k):
            return getattr(target, k, None)
    keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
            "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings")
    d = {k: v for k in keys if isinstance(v := get(k), (int, float)) and not isinstance(v, bool)}
    heads = d.get("num_attention_heads")
    if heads and "num_key_value_heads" not in d:
        d["num_key_value_heads"] = heads  # no GQA in the target's config: as many KV heads
    if heads and "head_dim" not in d and d.get("hidden_size"):
        d["head_dim"] = d["hidden_size"] // heads
    d.update(num_hidden_layers=1, model_type="llama", torch_dtype="bfloat16",
             architectures=["LlamaForCausalLMEagle3"] if method == "eagle3" else ["LlamaForCausalLM"])
    if method == "eagle3":
        d["draft_vocab_size"] = 32000
    return d


def _source_subclasses(module: str, cls: str, base: str) -> bool:
    """Whether ``module``'s class ``cls`` names ``base`` among its bases (read, not imported)."""
    import ast
    import importlib.util

    tree = ast.parse(open(importlib.util.find_spec(module).origin).read())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    names = set()
    for b in node.bases:
        b = b.value if isinstance(b, ast.Subscript) else b  # Generic[...] / Builder[Metadata]
        names.add(b.id if isinstance(b, ast.Name) else getattr(b, "attr", None))
    return base in names


def mla_evidence(vc) -> dict:
    """An MLA model plans nothing in the guarded buffer: vLLM's own validation of the FlashInfer
    backend refuses MLA (so ``--attention-backend FLASHINFER`` cannot serve it), and vLLM's
    FlashInfer MLA builder is not a ``FlashInferMetadataBuilder`` (it has its own module-level
    workspace, ``backends/mla/flashinfer_mla.py`` ``_get_workspace_buffer``), so the guarded
    ``FlashInferMetadataBuilder._get_workspace_buffer`` is never asked."""
    import inspect

    from vllm.v1.attention.backends.flashinfer import FlashInferBackend, FlashInferMetadataBuilder

    mc = vc.model_config
    params = inspect.signature(FlashInferBackend.validate_configuration).parameters
    kw = dict(head_size=mc.get_head_size(), dtype=mc.dtype, kv_cache_dtype=vc.cache_config.cache_dtype,
              block_size=vc.cache_config.block_size, use_mla=True, has_sink=False, use_sparse=False,
              use_mm_prefix=False, use_per_head_quant_scales=False, attn_type="decoder")
    from vllm.platforms import current_platform

    kw["device_capability"] = current_platform.get_device_capability()
    reasons = FlashInferBackend.validate_configuration(**{k: v for k, v in kw.items() if k in params})
    try:
        from vllm.v1.attention.backends.mla.flashinfer_mla import FlashInferMLAMetadataBuilder

        guarded = issubclass(FlashInferMLAMetadataBuilder, FlashInferMetadataBuilder)
    except ImportError as exc:
        guarded = f"no FlashInfer MLA backend here: {exc}"
    except RuntimeError:
        # vLLM 0.23.0 allocates its MLA workspace on the GPU at import (backends/mla/flashinfer_mla.py:
        # 99, ``g_fi_workspace = torch.zeros(..., device="cuda")``: its own buffer, not the guarded
        # one); read the builder's bases from the module's source instead
        guarded = _source_subclasses("vllm.v1.attention.backends.mla.flashinfer_mla", "FlashInferMLAMetadataBuilder",
                                     "FlashInferMetadataBuilder")
    return {"flashinfer_refuses": list(reasons), "mla_builder_is_guarded": guarded}


def model_groups(vc, tp: int, resolve_layout) -> tuple[list, dict]:
    """vLLM's model built on ``meta``; returns the FlashInfer KV-cache groups [(layer names,
    spec)] as vLLM groups them, and facts about the rest (other backends, Mamba groups)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model

    try:
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    except ImportError:  # older layout
        from vllm.attention.layer import AttentionLayerBase
    try:
        from vllm.v1.core.kv_cache_planning import get_kv_cache_groups
    except ImportError:  # vLLM < 0.33
        from vllm.v1.core.kv_cache_utils import get_kv_cache_groups

    with tp_ranks(vc, tp), set_current_vllm_config(vc), _building(), torch.device("meta"):
        initialize_model(vllm_config=vc)
    ctx = vc.compilation_config.static_forward_context
    target = {k for k, m in ctx.items() if isinstance(m, AttentionLayerBase)}
    sc = vc.speculative_config
    if sc is not None and getattr(sc, "method", None) in ("eagle", "eagle3"):
        _build_drafter(vc, tp, initialize_model)
    # What the executor does once the workers loaded the model: the block size the attention
    # backend wants, and for hybrid models the attention block aligned with the Mamba page size,
    # over --block-size if need be (v1/executor/uniproc_executor.py 0.23.0:69, 0.32.0:75, 0.33.0:75;
    # platforms/interface.py 0.23.0:491-527). Without it every hybrid model with a drawn block size
    # stopped in get_kv_cache_groups ("The page size of the layer is not divisible ...").
    from vllm.platforms import current_platform

    if hasattr(current_platform, "update_block_size_for_backend"):
        with tp_ranks(vc, tp), set_current_vllm_config(vc):
            current_platform.update_block_size_for_backend(vc)
    layers = {k: m for k, m in ctx.items() if isinstance(m, AttentionLayerBase)}
    specs = {}
    with set_current_vllm_config(vc):
        for k, m in layers.items():
            if k not in target:  # the proposer marks the drafter's layers (llm_base_proposer.py 0.33.0:1333-1335)
                m.is_draft_layer = True
            s = m.get_kv_cache_spec(vc)
            if s is not None:
                if getattr(m, "is_draft_layer", False) and "is_draft" in {f.name for f in dataclasses.fields(s)}:
                    s = dataclasses.replace(s, is_draft=True)  # gpu_model_runner.py 0.33.0:7114-7115
                specs[k] = s
        resolve_layout(vc, list(specs.values()))
        groups = get_kv_cache_groups(vc, specs)
    fi, info = [], {"layers": len(layers), "groups": []}
    for g in groups:
        backend = layers[g.layer_names[0]].get_attn_backend()
        row = {"layers": len(g.layer_names), "spec": type(g.kv_cache_spec).__name__, "backend": backend.get_name(),
               "block_size": getattr(g.kv_cache_spec, "block_size", None)}
        for f in ("sliding_window", "attention_chunk_size", "num_kv_heads", "head_size"):
            if getattr(g.kv_cache_spec, f, None) is not None:
                row[f] = getattr(g.kv_cache_spec, f)
        info["groups"].append(row)
        if backend.get_name() == "FLASHINFER":
            fi.append((list(g.layer_names), g.kv_cache_spec))
    imp = [layers[n].impl for names, _ in fi for n in names[:1]]
    info["soft_cap"] = sorted({float(getattr(i, "logits_soft_cap", None) or 0) for i in imp})
    info["sinks"] = any(getattr(i, "sinks", None) is not None for names, _ in fi
                        for i in (layers[n].impl for n in names))
    return fi, info
