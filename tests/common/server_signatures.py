"""The server functions `plan`'s server resolution calls, held to their installed signatures per
line (issue 42 item 3): a recorded table per line (tests/data/server_signatures.json), so that a
signature change in a new release, or a function moved away, shows up as one failing test naming
the function, not as a resolution that says the server refused.

The calls: those of ``vllm_guard/server_resolution.py`` (with the parser it builds through
``guard_core/deployment/server_parsers.py``) and of ``sglang_guard/server_resolution.py`` with
``sglang_guard/plan_resolve.py``, which it runs. Each name is ``module:attribute.path``; where a
line has another spelling (a function moved between lines), both are listed and the one absent is
recorded as absent.

    python -m tests.common.server_signatures record vllm|sglang   # this env's line into the table
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "data" / "server_signatures.json"
ABSENT = None

CALLS = {
    "vllm": (
        # step 1: vLLM's `vllm serve` parser (guard_core/deployment/server_parsers._vllm_parser)
        "vllm.entrypoints.cli.serve:ServeSubcommand.subparser_init",
        "vllm.utils.argparse_utils:FlexibleArgumentParser",
        "vllm.utils:FlexibleArgumentParser",
        # step 2-3: EngineArgs and the engine config
        "vllm.engine.arg_utils:EngineArgs.from_cli_args",
        "vllm.engine.arg_utils:EngineArgs.create_engine_config",
        "vllm.usage.usage_lib:UsageContext.OPENAI_API_SERVER",
        # step 4: the attention layers, their KV-cache specs, the layout and the CUDA-graph mode
        "vllm.config:set_current_vllm_config",
        "vllm.model_executor.layers.attention:Attention",
        "vllm.attention.layer:Attention",
        "vllm.model_executor.layers.attention:Attention.get_kv_cache_spec",
        "vllm.attention.layer:Attention.get_kv_cache_spec",
        "vllm.v1.attention.backends.utils:get_supported_kv_cache_layouts",
        "vllm.v1.attention.backends.utils:resolve_kv_cache_layout",
        "vllm.config:CompilationConfig.resolve_cudagraph_mode_and_sizes",
        # step 5: vLLM's FlashInfer builder
        "vllm.v1.attention.backends.flashinfer:FlashInferBackend",
        "vllm.v1.attention.backends.flashinfer:FlashInferMetadataBuilder",
        "vllm.v1.attention.backends.flashinfer:FlashInferMetadataBuilder.get_cudagraph_support",
    ),
    "sglang": (
        # server_resolution._options: the option spellings of this line's parser
        "sglang.srt.server_args:ServerArgs.add_cli_args",
        # plan_resolve._server_args: SGLang's own parser and resolution
        "sglang.srt.server_args:prepare_server_args",
        "sglang.srt.server_args:ServerArgs.resolve_once",
        "sglang.srt.runtime_context:get_context",
        "sglang.srt.runtime_context:get_parallel",
        # plan_resolve.resolve: the model config, the attention-TP size, the KV dtype, the backend
        "sglang.srt.configs.model_config:ModelConfig.from_server_args",
        "sglang.srt.configs.model_config:ModelConfig.get_num_kv_heads",
        "sglang.srt.layers.dp_attention:compute_dp_attention_world_info",
        "sglang.srt.model_executor.model_runner:ModelRunner.configure_kv_cache_dtype",
        "sglang.srt.layers.attention.flashinfer_backend:should_use_tensor_core",
        # server_resolution.answer: the workspace variable as SGLang's envs reads it
        "sglang.srt.environ:envs.SGLANG_FLASHINFER_WORKSPACE_SIZE",
    ),
}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _prepare(framework: str) -> None:
    """What the resolution does before it imports the server's modules (SGLang: sgl_kernel's
    stand-in where it cannot load on this host, as plan_resolve.resolve does)."""
    if framework == "sglang":
        from sglang_guard import simulated_device

        simulated_device.install_kernel_stand_in()


def signature_of(name: str) -> str | None:
    """The installed signature of ``module:attr.path``: ``inspect.signature`` as text (object
    addresses dropped), "<attribute>" for a value that is not called, None where absent."""
    mod_name, _, path = name.partition(":")
    try:
        obj = importlib.import_module(mod_name)
        for part in path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return ABSENT
    if not callable(obj):
        return "<attribute>"
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return "<no signature>"


def installed(framework: str) -> dict:
    _prepare(framework)
    return {name: signature_of(name) for name in CALLS[framework]}


def recorded(framework: str, line: str) -> dict | None:
    table = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    return table.get(framework, {}).get(line)


def differences(table: dict, now: dict) -> list[str]:
    """One line per call whose signature differs from the table's (or is new to it)."""
    out = []
    for name in sorted(set(table) | set(now)):
        if name not in table:
            out.append(f"{name}: not in the recorded table (record it)")
        elif name not in now:
            out.append(f"{name}: recorded, no longer called (record the table again)")
        elif table[name] != now[name]:
            out.append(f"{name}: recorded {table[name]!r}, installed {now[name]!r}")
    return out


def record(framework: str) -> str:
    from importlib import metadata

    line = metadata.version(framework)
    table = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    table.setdefault(framework, {})[line] = installed(framework)
    table[framework] = dict(sorted(table[framework].items(), key=lambda kv: [int(x) for x in kv[0].split(".")]))
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    return line


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "record" and sys.argv[2] in CALLS:
        print(f"recorded {sys.argv[2]} {record(sys.argv[2])} in {TABLE}")
    else:
        sys.exit(__doc__)
