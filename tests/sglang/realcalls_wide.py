"""Issue 27 item 4 (SGLang): deployments resolved by SGLang's own code on the simulated GPU.

``resolved_server_args`` builds the ServerArgs of a generated deployment with ``device="cuda"``
and lets SGLang resolve it (0.5.23: ``ServerArgs.resolve_once``, the arg_groups pipeline;
<= 0.5.2x: ``ServerArgs.__post_init__``): capture sizes, the chunked-prefill size, attention
TP/DP, what DP attention changes. The one stand-in: SGLang's ``get_device_memory_capacity``
answers the table GPU's memory (tests/realcalls/gpus.py MEMORY_MIB; a CPU has no GPU to ask),
only while SGLang resolves. Nothing is written into the harness afterwards: the capture sizes
are what SGLang's ``get_batch_sizes_to_capture`` returns from the resolved record, the heads per
rank what SGLang's model config and attention-TP size give.

``capture_source_hashes`` (with tests/sglang/test_capture_replica.py): the harness's capture loop
(realcalls_scenarios._capture) is a replica of SGLang's capture of one batch size; the hash of
the real function's AST is committed per line, so a change upstream fails a test.
"""

from __future__ import annotations

import sys

# modules that call get_device_memory_capacity while SGLang resolves its arguments
_MEM_USERS = ("sglang.srt.server_args", "sglang.srt.arg_groups.memory_hook", "sglang.srt.arg_groups.kv_shard_hook",
              "sglang.srt.arg_groups.model_overrides.qwen3_vl")


def resolved_server_args(model_dir: str, kw: dict, gpu_key: str):
    """SGLang's ServerArgs for ``kw`` (server arguments as a user passes them), resolved by SGLang
    for the table GPU ``gpu_key``; the runtime context (0.5.19+) is installed from it."""
    import importlib

    from tests.realcalls import gpus as table

    mem = float(table.MEMORY_MIB[gpu_key])
    for name in _MEM_USERS:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    saved = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang") and callable(getattr(mod, "get_device_memory_capacity", None)):
            saved.append((mod, mod.get_device_memory_capacity))
            mod.get_device_memory_capacity = lambda device=None: mem
    from sglang.srt.server_args import ServerArgs

    args = dict(model_path=model_dir, load_format="dummy", device="cuda", skip_tokenizer_init=True,
                attention_backend="flashinfer")
    args.update(kw)
    try:
        sa = ServerArgs(**args)
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
    finally:
        for mod, fn in saved:
            mod.get_device_memory_capacity = fn
    try:
        from sglang.srt.runtime_context import get_context

        get_context().set_server_args(sa)
    except ImportError:
        pass
    return sa


def field(sa, bag: str, name: str):
    """A resolved setting: the runtime context's bag (0.5.19+), else the ServerArgs field."""
    try:
        import sglang.srt.runtime_context as rc

        b = getattr(rc, "get_" + bag)()
        if b is not None:
            return getattr(b, name)
    except Exception:
        pass
    return getattr(sa, name, None)


def attention_tp_size(sa) -> int:
    """SGLang's own attention-TP width for this deployment: 0.5.19+ the resolved parallel bag
    (``derive_attn_tp_size``), else ``dp_attention.compute_dp_attention_world_info``."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().attn_tp_size)
    except Exception:
        pass
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info

    out = compute_dp_attention_world_info(bool(sa.enable_dp_attention), 0, int(sa.tp_size), int(sa.dp_size))
    return int(out[1])


def graphs_disabled(sa) -> bool:
    return bool(field(sa, "exec", "disable_cuda_graph"))


def chunk_limits(sa, context: int) -> tuple[int, int]:
    """(new tokens per batch, new tokens one request may bring alone). With chunked prefill
    (SGLang's resolved ``chunked_prefill_size`` > 0) both are the chunk. Without it
    (``--chunked-prefill-size -1``) SGLang's PrefillAdder admits the first request of a batch
    whatever its length and later ones within ``max_prefill_tokens`` (schedule_policy.py
    0.5.11:865 ``if input_tokens >= self.rem_input_tokens and len(self.can_run_list) != 0``;
    0.5.23:1627-1633 "Without chunking, allow the first request even above the input cap"), so
    one request may bring a whole context."""
    chunk = field(sa, "schedule", "chunked_prefill_size")
    if chunk and int(chunk) > 0:
        return int(chunk), int(chunk)
    mpt = int(field(sa, "schedule", "max_prefill_tokens") or 16384)
    return mpt, max(mpt, int(context))


# ---------------------------------------------------------------- the capture replica's source

# (file in the sglang wheel, class, method) the harness's capture loop replays: what SGLang hands
# the attention backend when it captures one batch size (bs requests, bs x tokens-per-request
# tokens, seq_lens at the backend's fill value, request rows 0): <= 0.5.1x
# CudaGraphRunner.capture_one_batch_size; 0.5.2x DecodeCudaGraphRunner.capture_prepare (the
# batch) and capture_one_shape (the metadata call)
CAPTURE_FUNCTIONS = (
    ("sglang/srt/model_executor/cuda_graph_runner.py", "CudaGraphRunner", "capture_one_batch_size"),
    ("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner", "capture_prepare"),
    ("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner", "capture_one_shape"),
)


def capture_source_hashes() -> dict:
    """{Class.method: (file:first-last line, sha256 of ``ast.dump`` of the method)} for each capture
    function of the installed SGLang wheel (read as files: nothing is imported)."""
    import ast
    import hashlib
    from importlib import metadata

    dist = metadata.distribution("sglang")
    out = {}
    for rel, cls, meth in CAPTURE_FUNCTIONS:
        path = dist.locate_file(rel)
        try:
            tree = ast.parse(open(path).read())
        except OSError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == meth:
                        digest = hashlib.sha256(ast.dump(fn).encode()).hexdigest()
                        out[f"{cls}.{meth}"] = (f"{rel}:{fn.lineno}-{fn.end_lineno}", digest)
    return out
