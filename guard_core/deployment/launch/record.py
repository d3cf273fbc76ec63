"""What a launch command resolves to (``Launch``) and the bounds every number read from it keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard_core.deployment.deployment_record import ServerShape

__all__ = ["BOUNDS", "Launch", "MAX_CAPTURE_SIZES", "MAX_TOKENS", "MAX_TOKEN_CHARS", "READ_ENV", "SGLANG_EAGLE_FAMILY"]


@dataclass
class Launch(ServerShape):
    """What a launch command says: the server's shape (``ServerShape``, the fields ``Deployment`` has
    too: parallelism, limits, speculative decoding, CUDA graphs, pages), how the server was started
    and read, and what else the command sets."""

    framework: str  # vllm | sglang
    form: str  # how it was started
    model: str | None = None
    ep: int | None = None  # SGLang --ep-size
    kv_cache_dtype: str | None = None
    draft_tokens_from_model: bool = False  # vLLM MTP without num_speculative_tokens: the model's MTP depth
    # --hf-overrides (vLLM) / --json-model-override-args (SGLang): {"option", "values", "nested"}
    model_overrides: dict | None = None
    attention_backend: str | None = None
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    quantization: str | None = None
    dp_attention: bool = False
    image_line: str | None = None  # the server version a `docker run` image tag names (vllm/vllm-openai:v0.19.1)
    workspace_bytes: int | None = None  # the native workspace variable in the command or the environment
    workspace_source: str | None = None
    reader: str = ""  # which parser read it
    deterministic: bool = False  # SGLang --enable-deterministic-inference
    kv_pool_tokens: int | None = None  # SGLang --max-total-tokens
    # SGLang --mem-fraction-static (ignored for the workspace, read for the KV budget line, issue 28)
    mem_fraction_static: float | None = None
    env: dict = field(default_factory=dict)  # leading VAR=value assignments the plan reads (READ_ENV)
    # the command's operations on the environment the server inherits (server_environment)
    env_ops: list = field(default_factory=list)
    ignored: list = field(default_factory=list)  # passed, known not to change the workspace
    not_read: list = field(default_factory=list)  # passed, not read: the default is assumed
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        if d["capture_sizes"] is not None:
            d["capture_sizes"] = list(d["capture_sizes"])
        d["ignored"], d["not_read"], d["notes"] = list(self.ignored), list(self.not_read), list(self.notes)
        return d

    def deployment(self) -> dict:
        """What the command resolves to (for comparing readers): every read field."""
        d = self.as_dict()
        for k in ("form", "reader", "ignored", "not_read", "notes", "workspace_source", "env_ops"):
            d.pop(k)
        return d


# SGLang's speculative algorithms with an EAGLE-style draft worker whose steps/topk/draft tokens SGLang
# resolves itself (server_args.py 0.5.5:1523-1604: NEXTN -> EAGLE; EAGLE, EAGLE3, STANDALONE)
SGLANG_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

# Leading VAR=value assignments of a launch command that change the plan (read, not skipped):
# SGLang's deterministic split tile sizes (flashinfer_backend.py, get_int_env_var).
READ_ENV = ("SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE", "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE")

# Bounds of every number read from a launch command: those of the plan options
# (guard_core/commands/cli.py _INT_BOUNDS), checked on the text or the parsed value before use.
BOUNDS = {"parallel": 1024, "max_num_seqs": 65536, "max_capture": 16384, "max_batched_tokens": 1 << 24,
          "max_model_len": 1 << 27, "draft_tokens": 128, "page_size": 65536}
MAX_CAPTURE_SIZES = 1024
MAX_TOKENS = 4096
MAX_TOKEN_CHARS = 1 << 20
