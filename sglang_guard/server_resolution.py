"""SGLang's answer in the generic plan stage's protocol (helper i26v's
``guard_core/commands/plan/server_resolution.py``: ``python -m <framework>_guard.server_resolution``,
one JSON request on stdin, one ``FLASHINFER_GUARD_RESOLVED {json}`` answer line).

Request ``{"tokens", "model", "gpu": table key, "trtllm", "flags": {plan flag: value}}``; plan's
flags become SGLang's own options (``FLAG_OPTIONS``) after the command's, so SGLang's parser and
resolution take them as it takes the command's. The resolution itself is ``plan_resolve.resolve``
(SGLang's ServerArgs and ModelConfig on the simulated GPU, the adapter's ``workspace_facts``).
The buffer SGLang allocates: ``SGLANG_FLASHINFER_WORKSPACE_SIZE`` as SGLang's ``envs`` reads it
in the server's environment, raised to 512 MiB for the architectures its backend sets so
(``sglang_defaults.sglang_default_workspace``, flashinfer_backend.py), and 2 GiB under
``--enable-deterministic-inference``, which the backend sets last, over both (0.5.23:437-451).
"""

from __future__ import annotations

import json
import sys

__all__ = ["FLAG_OPTIONS", "answer", "main"]

# plan's flag -> SGLang's option (the decode CUDA-graph options were renamed in 0.5.20: both spelled)
FLAG_OPTIONS = {"tp": "--tp-size", "max_num_seqs": "--max-running-requests",
                "max_batched_tokens": "--chunked-prefill-size", "max_model_len": "--context-length",
                "kv_cache_dtype": "--kv-cache-dtype", "page_size": "--page-size",
                "max_capture_batch": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
                "capture_sizes": ("--cuda-graph-bs-decode", "--cuda-graph-bs"),
                "no_cuda_graph": "--disable-cuda-graph",
                # SGLang's speculative_num_draft_tokens counts the verified (bonus) token
                "draft_tokens": "--speculative-num-draft-tokens"}


def _options(flags: dict) -> list[str]:
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)  # the spellings this line's own parser takes
    known = set(parser._option_string_actions)
    out: list[str] = []
    for flag, v in flags.items():
        opt = FLAG_OPTIONS.get(flag)
        if opt is None:
            raise ValueError(f"plan's --{flag.replace('_', '-')} has no SGLang option")
        if isinstance(opt, tuple):
            opt = opt[0] if opt[0] in known else opt[1]
        if flag == "no_cuda_graph":
            out.append(opt)
        elif flag == "capture_sizes":
            out += [opt, *[str(int(x)) for x in v]]
        elif flag == "draft_tokens":
            out += [opt, str(int(v) + 1)]
        else:
            out += [opt, str(v)]
    return out


def answer(req: dict) -> dict:
    import os

    from guard_core.decide.fixed_split import SGLANG_FORCED_BYTES
    from guard_core.deployment.sglang_defaults import SGLANG_LARGE, sglang_default_workspace
    from guard_core.gpus import find_spec, gpu_memory

    from . import plan_resolve

    spec = find_spec(req["gpu"])
    mem = gpu_memory(spec.key)
    line = plan_resolve._version() or ""
    argv = list(req.get("tokens") or [])
    res = plan_resolve.resolve({"argv": argv + _options(req.get("flags") or {}), "model_dir": req["model"],
                                "line": line, "gpu": {"name": spec.name, "key": spec.key, "cc": list(spec.cc),
                                                      "memory_mib": mem[1] if mem else None}})
    if not res.get("ok"):
        return res
    r = res["resolved"]
    from sglang.srt.environ import envs

    own = int(envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.get())
    user = own if "SGLANG_FLASHINFER_WORKSPACE_SIZE" in os.environ else None
    source = (f"SGLANG_FLASHINFER_WORKSPACE_SIZE as SGLang {line}'s envs reads it"
              + (" (the user's)" if user is not None else " (its default)"))
    if sglang_default_workspace(line, r.get("architecture")) == SGLANG_LARGE:
        own, user = SGLANG_LARGE, None  # the backend .set()s 512 MiB over the user's value
        source = f"SGLang {line} sets 512 MiB for {r.get('architecture')} (flashinfer_backend.py), over a user's value"
    if r.get("deterministic"):
        # FlashInferAttnBackend.__init__ under --enable-deterministic-inference:
        # envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2048 * 1024 * 1024) after the architecture list, over
        # a user's value (flashinfer_backend.py 0.5.5:183, 0.5.23:437-451; SGLang PR #30244 open)
        own, user = SGLANG_FORCED_BYTES, None
        source = (f"--enable-deterministic-inference: SGLang {line} sets SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB, "
                  "over a user's value (flashinfer_backend.py 0.5.5:183, 0.5.23:437-451)")
    from guard_core.versions import flashinfer_version

    builders = []
    for f in res["facts"]:
        lay = f["layout"]
        facts = dict(framework="sglang", flashinfer_version=flashinfer_version(), layout=lay, limits=f["limits"],
                     planner_facts=f["planner_facts"], kv_dtype_bytes_options=f["kv_dtype_bytes_options"],
                     missing=f["missing"])
        group = dict(kind="full", num_qo_heads=lay["num_qo_heads"], num_kv_heads=lay["num_kv_heads"],
                     head_dim_qk=lay["head_dim_qk"], head_dim_vo=lay["head_dim_vo"], count=f["num_layers"] or 1,
                     window=None, sinks=False)
        builders.append({"facts": facts, "server_bytes": own, "user_bytes": user, "group": group,
                         "runner": f["runner"], "server_source": source, "fixed_split": bool(f.get("fixed_split"))})
    k = r.get("speculative_num_draft_tokens")
    sizes = res["facts"][0]["limits"]["capture_sizes"]
    resolved = dict(r, max_num_seqs=r.get("max_running_requests"), max_batched_tokens=r.get("chunked_prefill_size"),
                    max_model_len=r.get("context_len"), draft_tokens=(int(k) - 1) if k else None,
                    page_size=r.get("page_size") or 1, max_capture=max(sizes, default=None),
                    cudagraph_capture_sizes=sizes)
    return {"ok": True, "label": f"SGLang {line}", "builders": builders, "resolved": resolved}


def main() -> int:
    from .plan_resolve import answer_line

    return answer_line(lambda: answer(json.loads(sys.stdin.read())))


if __name__ == "__main__":
    sys.exit(main())
