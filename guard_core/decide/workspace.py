"""One entry for the float-workspace decision, shared by both adapters.

An adapter reads the live server into a ``WorkspaceFacts`` record (what it
could read, and the names of what it could not) and hands it here with the
server's and the user's sizes and the settings; it gets back one
``WorkspaceOutcome`` (the decision: size, reason, log line; the warnings to
log once) and applies it. The sequence is the same for every framework:
``choose_planners`` -> ``size_choice`` -> the "does not say X" warning ->
``exact_refusal`` -> ``decide_workspace``.

``need()`` and ``decide()`` are separate because SGLang answers its size
source several times per backend with different server sizes: the need is
computed once, the decision per size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard_core.flashinfer.releases import NATIVE_VAR

__all__ = ["FRAMEWORKS", "FrameworkNames", "WorkspaceFacts", "WorkspaceNeed", "WorkspaceOutcome",
           "need", "decide", "remedies", "is_out_of_memory", "assess_fixed_split", "decide_fixed_split",
           "vllm_graph_limits", "vllm_reorder_batch_threshold", "vllm_spec_decode_graphs",
           "sglang_runner_limits", "sglang_capture_sizes"]


@dataclass(frozen=True)
class FrameworkNames:
    """How one framework is named in the decision's lines (kept as each adapter always said them)."""

    decision: str  # in the decision text ("vLLM allocates ...", "sglang allocates ...")
    refusal: str  # in exact's refusal ("outside the checked SGLang lines")
    package: str  # the distribution whose installed version is checked
    reader: str  # the "<reader> does not say X" warning
    missing_key: str  # the once-key prefix of that warning
    native_var: str  # the user's native size variable


FRAMEWORKS = {
    "vllm": FrameworkNames("vLLM", "vLLM", "vllm", "vLLM builder", "workspace-missing:",
                           NATIVE_VAR["vllm"]),
    "sglang": FrameworkNames("sglang", "SGLang", "sglang", "SGLang", "workspace.missing:",
                             NATIVE_VAR["sglang"]),
}


@dataclass(frozen=True)
class WorkspaceFacts:
    """What an adapter read from the live server, framework-free.

    ``layout``/``limits``/``planner_facts`` are guard_core.flashinfer.sizing/planner_choice
    records; ``missing`` names what the adapter could not read (sized for the
    larger need). ``gpu`` None: nothing to size (only a set size applies)."""

    framework: str  # a key of FRAMEWORKS
    flashinfer_version: str
    gpu: Any = None
    layout: Any = None
    limits: Any = None
    planner_facts: Any = None
    kv_dtype_bytes_options: tuple | None = None
    missing: tuple = ()
    # ``flashinfer-guard plan --prefill-planner/--decode-planner/--decode-blocks-per-sm``:
    # (prefill or None, decode or None, decode blocks per SM or None) over the chosen planners
    planners_given: tuple | None = None

    @property
    def names(self) -> FrameworkNames:
        return FRAMEWORKS[self.framework]


@dataclass(frozen=True)
class WorkspaceNeed:
    """The computed need (a guard_core.flashinfer.sizing.Requirement) and the once-warnings it brings."""

    requirement: Any
    warnings: tuple = ()  # ((once-key, text), ...)
    choice: Any = None  # the guard_core.flashinfer.planner_choice.PlannerChoice sized


@dataclass(frozen=True)
class WorkspaceOutcome:
    """The one decision an adapter applies (its size, reason and log line are the
    decision's own fields: nothing is copied here)."""

    decision: Any  # guard_core.decide.records.WorkspaceDecision
    requirement: Any = None
    warnings: tuple = ()  # ((once-key, text), ...), to log before the decision


def need(facts: WorkspaceFacts) -> WorkspaceNeed:
    """The planners for these facts and the need over the envelope, with one
    warning naming every fact that was missing (adapter's and planner choice's)."""
    from guard_core.flashinfer.planner_choice import choose_planners, size_choice

    choice = choose_planners(facts.planner_facts)
    if facts.planners_given is not None:
        choice = _given(choice, *facts.planners_given)
    req = size_choice(facts.layout, facts.limits, facts.gpu, facts.flashinfer_version, choice, facts.framework,
                      facts.kv_dtype_bytes_options)
    gone = list(dict.fromkeys([*facts.missing, *choice.missing]))
    warnings = ()
    if gone:
        n = facts.names
        warnings = ((n.missing_key + ",".join(gone),
                     f"workspace: {n.reader} does not say {', '.join(gone)}; sized for the larger need"),)
    return WorkspaceNeed(req, warnings, choice)


def _given(choice, prefill, decode, blocks_per_sm):
    """The chosen planners with the phases a user forced (``plan --*-planner``)."""
    from dataclasses import replace as _replace

    from guard_core.flashinfer.sizing import Planners

    cs = tuple(dict.fromkeys(Planners(prefill=prefill or c.prefill, decode=decode or c.decode,
                                      decode_blocks_per_sm=blocks_per_sm) for c in choice.candidates))
    return _replace(choice, candidates=cs, reasons=choice.reasons[:len(cs)])


def remedies(facts: WorkspaceFacts, computed: WorkspaceNeed, budget_bytes: int, *, graphs: bool) -> dict:
    """What makes ``computed`` fit ``budget_bytes`` without the guard: the largest CUDA-graph
    batch whose plans fit (``graphs``), and the need on FlashInfer 0.7.1 (PR #5177) where this
    release sizes the prefill scratch by rows (each through ``need`` of changed facts)."""
    from dataclasses import replace as _replace

    from guard_core.flashinfer import planner as fm

    out: dict = {}
    lim = facts.limits
    if graphs and lim.capture_sizes:
        from guard_core.flashinfer.sizing import largest_fitting

        def fits(b: int) -> bool:
            probe = _replace(facts, limits=_replace(lim, capture_sizes=(b,), eager=False))
            return need(probe).requirement.float_bytes <= budget_bytes

        out["largest_capture_batch_that_fits"] = largest_fitting(max(lim.capture_sizes), fits)
    if fm.features(facts.flashinfer_version).rows_by_query is False:
        out["flashinfer_0_7_1_need_bytes"] = need(_replace(facts, flashinfer_version="0.7.1")).requirement.float_bytes
    return out


def decide(facts: WorkspaceFacts, *, server_bytes: int, user_bytes: int | None, settings,
           computed: WorkspaceNeed | None = None) -> WorkspaceOutcome:
    """The workspace decision for these facts: the need (``computed`` when the
    adapter already has it; none with workspace off or without a GPU), exact's
    refusal outside the checked lines, then ``decide_workspace``."""
    from guard_core.decide.records import decide_workspace, exact_refusal

    if computed is None and settings.workspace != "off" and facts.gpu is not None and facts.layout is not None:
        computed = need(facts)
    req = computed.requirement if computed is not None else None
    n = facts.names
    refused = None
    if settings.workspace == "exact":
        from guard_core.versions import installed_version

        refused = exact_refusal(n.refusal, installed_version(n.package), facts.flashinfer_version)
    dec = decide_workspace(req, framework=n.decision, server_bytes=int(server_bytes), user_bytes=user_bytes,
                           user_var=n.native_var, settings=settings, flashinfer_version=facts.flashinfer_version,
                           exact_refused=refused)
    return WorkspaceOutcome(dec, req, computed.warnings if computed is not None else ())


def assess_fixed_split(facts: WorkspaceFacts, computed: WorkspaceNeed, *, server_bytes: int, settings,
                       gpu_memory: int | None):
    """Fixed-split modes (SGLang deterministic inference; ``facts.limits`` carry the
    split sizes): ``guard_core.decide.fixed_split.assess`` of the need ``computed`` for these
    facts against the server's ``server_bytes``."""
    from guard_core.decide.fixed_split import assess

    req = computed.requirement
    return assess(req.layout, facts.limits, facts.gpu, facts.flashinfer_version, req.planners, facts.framework,
                  server_bytes=int(server_bytes), settings=settings, requirement=req, gpu_memory=gpu_memory)


def decide_fixed_split(facts: WorkspaceFacts, computed: WorkspaceNeed, assessment, *, server_bytes: int,
                       settings) -> WorkspaceOutcome:
    """The workspace decision in a fixed-split mode, from ``assess_fixed_split``'s
    assessment (``decisions.decide_fixed_split_workspace``)."""
    from guard_core.decide.records import decide_fixed_split_workspace

    req = computed.requirement
    dec = decide_fixed_split_workspace(req, assessment, framework=facts.framework, server_bytes=int(server_bytes),
                                       settings=settings, flashinfer_version=facts.flashinfer_version)
    return WorkspaceOutcome(dec, req, computed.warnings)


def vllm_reorder_batch_threshold(draft_tokens: int, spec_as_decode: bool | None, dcp: int = 1,
                                 parallel_drafting: bool = False) -> int | None:
    """vLLM's FlashInfer builder ``reorder_batch_threshold`` (``_init_reorder_batch_threshold(1,
    supports_spec_as_decode=...)``, v1/attention/backend.py 0.23.0:557-587): 1 + draft tokens
    (twice the drafts with parallel drafting) where the builder runs speculative batches as
    decodes, else 1, and 1 under decode context parallel. ``spec_as_decode`` None: unknown (None).
    What ``spec_as_decode`` is per line: 0.23.0 ``can_use_trtllm`` (flashinfer.py:648,667); 0.32.0
    ``flashinfer_trtllm_api_decode_kernel is not None`` (flashinfer.py:928-932); 0.33.0 that or
    ``_use_fa2_native_decode()`` (below SM90, flashinfer.py:118-120,1054-1058)."""
    if int(dcp or 1) > 1:
        return 1
    if spec_as_decode is None:
        return None
    if spec_as_decode and int(draft_tokens or 0) > 0:
        return 1 + (2 if parallel_drafting else 1) * int(draft_tokens)
    return 1


def vllm_spec_decode_graphs(draft_tokens: int, spec_as_decode: bool | None, dcp: int = 1) -> bool | None:
    """Whether vLLM keeps FULL decode CUDA graphs (the ones FlashInfer plans) with speculative
    decoding: only where the FlashInfer builder reports ``AttentionCGSupport.UNIFORM_BATCH``,
    which is where it runs speculative batches as decodes (``get_cudagraph_support``:
    flashinfer.py 0.23.0:713-745 TRT-LLM decode for every KV spec; 0.33.0:1176-1226 TRT-LLM/XQA
    decode, or FA2's native decode below SM90; never under DCP); otherwise
    ``resolve_cudagraph_mode_and_sizes`` drops to PIECEWISE (or NONE) (config/compilation.py
    0.23.0:1398-1416, 0.33.0:1449-1466) and the builder's ``enable_cuda_graph`` is False.
    True without speculation; None: unknown."""
    if not int(draft_tokens or 0):
        return True
    if int(dcp or 1) > 1:
        return False
    return spec_as_decode


def vllm_graph_limits(*, capture_sizes, max_num_seqs: int, max_num_batched_tokens: int, draft_tokens: int,
                      max_model_len, reorder_batch_threshold, fa2_native_decode: bool = False):
    """The serving envelope of one vLLM FlashInfer builder: which CUDA graphs vLLM captures and
    plans in this buffer. ``capture_sizes``: the capture list up to the builder's
    ``_decode_cudagraph_max_bs``, in tokens, and that size itself (planned there, captured or not). Speculative verify batches run through the decode
    graphs only where the builder treats them as decodes (``reorder_batch_threshold`` > 1;
    None: unknown, the larger need); otherwise they are prefills (eager) and the decode graphs
    hold one token per request. The adapter reads the threshold from the builder, ``plan``
    from ``vllm_reorder_batch_threshold``.

    Besides the captured batches, every pure decode batch of at most ``_decode_cudagraph_max_bs``
    tokens plans the CUDA-graph decode wrapper, whatever its query lengths (``use_cudagraph =
    enable_cuda_graph and pure_decode and num_decode_tokens <= _decode_cudagraph_max_bs``:
    v1/attention/backends/flashinfer.py 0.23.0:1210-1214, 0.32.0:1776-1780, 0.33.0:1938-1942):
    under speculation a step where no request has a draft plans one-token batches there besides
    the verify graphs (issue 27). ``fa2_native_decode``: vLLM 0.33's FA2 native decode below SM90
    (``_use_fa2_native_decode``, 0.33.0:118-120) plans ``q_len_per_req = num_decode_tokens //
    num_decodes`` (0.33.0:1945-1948) over a decode run of one query length
    (``split_decodes_and_prefills(require_uniform=True)``, v1/attention/backends/utils.py
    0.33.0:872-893): every length from 1 to 1 + draft tokens."""
    from guard_core.flashinfer.sizing import ServingLimits

    verify_in_graph = True if reorder_batch_threshold is None else int(reorder_batch_threshold) > 1
    return ServingLimits(capture_sizes=tuple(capture_sizes), max_num_seqs=int(max_num_seqs),
                         max_num_batched_tokens=int(max_num_batched_tokens), draft_tokens=int(draft_tokens or 0),
                         eager=True, max_model_len=max_model_len, verify_in_graph=verify_in_graph,
                         capture_unit="tokens", one_token_graphs=True,
                         partial_verify_graphs=bool(fa2_native_decode) and verify_in_graph)


def sglang_capture_sizes(sizes, request_pool: int | None) -> tuple:
    """The decode CUDA-graph batch sizes SGLang captures from its list: where the list goes
    beyond the runner's request pool (``req_to_token_pool.size``) the pool's size is added and
    nothing above it is captured (``get_batch_sizes_to_capture``: cuda_graph_runner.py
    0.5.5:182-202, 0.5.11:496-522; model_executor/runner/base_cuda_graph_runner.py 0.5.23:
    ``capture_bs += [num_max_requests]`` then ``bs <= num_max_requests``). ``request_pool``
    None: not known, the list as it is (the larger need)."""
    sizes = [int(b) for b in sizes]
    if request_pool:
        pool = int(request_pool)
        if sizes and max(sizes) > pool:
            sizes.append(pool)
        sizes = [b for b in sizes if b <= pool]
    return tuple(sorted(set(sizes)))


def sglang_runner_limits(*, capture_sizes, max_num_seqs: int, chunk: int, max_model_len, speculative: bool,
                         draft_runner: bool = False, verify_q: int | None = None, topk: int | None = None,
                         request_pool: int | None = None):
    """The serving envelope of one SGLang model runner's FlashInfer backend, as
    ``sglang_guard/workspace_facts.py`` reads it (``_read_limits``/``_speculative``): capture
    sizes in requests, cut at the runner's request pool (``sglang_capture_sizes``); with
    speculation the target captures TARGET_VERIFY graphs only (cuda_graph_runner.py
    0.5.5:263-277), each request holding ``verify_q`` tokens (speculative_num_draft_tokens
    counts the bonus token); the draft worker verifies nothing and decodes ``topk`` x bs
    requests per step (flashinfer_backend.py 0.5.5:1446, 0.5.23:2501)."""
    from guard_core.flashinfer.sizing import ServingLimits

    per_seq = max(1, int(topk or 1)) if (speculative and draft_runner) else 1
    vq = int(verify_q) if (speculative and not draft_runner and verify_q) else None
    return ServingLimits(capture_sizes=sglang_capture_sizes(capture_sizes, request_pool),
                         max_num_seqs=int(max_num_seqs),
                         max_num_batched_tokens=int(chunk), draft_tokens=max(0, (vq or 1) - 1), verify_q_len=vq,
                         eager=True, max_model_len=max_model_len, decode_requests_per_seq=per_seq,
                         one_token_graphs=not (speculative and not draft_runner))


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError) or an allocator's
    "out of memory" error, by type name and message (no torch import)."""
    return any(k.__name__ == "OutOfMemoryError" for k in type(exc).__mro__) or "out of memory" in str(exc).lower()
