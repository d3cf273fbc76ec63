"""FLASHINFER_GUARD_WORKSPACE=exact (issue 12): the need rounded up to 1 MiB, also
below what the server would allocate, only where the model is exact and the
line checked; elsewhere it acts as auto and says why. auto's "ok" line says
what exact would free."""

from guard_core.decide.records import decide_workspace, exact_refusal
from guard_core.gpus import lookup_gpu
from guard_core.runtime.settings import Settings, load_settings
from guard_core.flashinfer.sizing import AttentionLayout, Planners, ServingLimits, compute_requirement

MIB = 1 << 20
QWEN35 = AttentionLayout(32, 2, 256, page_size=16)


def req(fi="0.7.2.post1"):
    return compute_requirement(QWEN35, ServingLimits(capture_sizes=(512,), max_num_seqs=512, capture_unit="tokens",
                                                     eager=False), lookup_gpu("b300"), fi, Planners("fa2", "fa2"))


def test_exact_setting_parses():
    s = load_settings({"FLASHINFER_GUARD_WORKSPACE": "exact"})
    assert s.workspace == "exact" and not s.warnings


def test_exact_shrinks_where_checked():
    r = req()
    dec = decide_workspace(r, framework="vLLM", server_bytes=2048 * MIB, settings=Settings(workspace="exact"),
                           flashinfer_version="0.7.2.post1", exact_refused=exact_refusal("vLLM", "0.33.0", "0.7.2.post1"))
    assert dec.action == "exact" and dec.allocate_bytes == -(-r.float_bytes // MIB) * MIB < 2048 * MIB
    assert "allocating 33 MiB instead of 2048 MiB (frees 2015 MiB)" in dec.line


def test_exact_keeps_a_user_native_size():
    dec = decide_workspace(req(), framework="vLLM", server_bytes=1024 * MIB, user_bytes=1024 * MIB,
                           user_var="VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", settings=Settings(workspace="exact"),
                           flashinfer_version="0.7.2.post1")
    assert dec.allocate_bytes == 1024 * MIB and "user's choice" in dec.line and "acting as auto" in dec.line


def test_exact_refused_outside_checked_ranges_acts_as_auto():
    assert exact_refusal("vLLM", "0.33.0", "0.7.2.post1") is None
    assert "outside the releases" in exact_refusal("vLLM", "0.33.0", "0.8.0")
    assert "outside the checked lines" in exact_refusal("vLLM", "0.40.0", "0.7.2.post1")
    assert "outside the checked lines" in exact_refusal("SGLang", "0.5.4", "0.5.0")
    why = exact_refusal("vLLM", "0.40.0", "0.7.2.post1")
    dec = decide_workspace(req(), framework="vLLM", server_bytes=2048 * MIB, settings=Settings(workspace="exact"),
                           flashinfer_version="0.7.2.post1", exact_refused=why)
    assert dec.allocate_bytes == 2048 * MIB and "acting as auto" in dec.line and "0.40.0" in dec.line


def test_exact_raises_where_the_need_is_larger():
    r = req("0.6.12")
    dec = decide_workspace(r, framework="vLLM", server_bytes=394 * MIB, settings=Settings(workspace="exact"),
                           flashinfer_version="0.6.12", exact_refused=None)
    assert dec.action == "exact" and dec.allocate_bytes == 514 * MIB and "raising 394 MiB -> 514 MiB" in dec.line


def test_auto_ok_line_says_what_exact_would_free():
    dec = decide_workspace(req(), framework="vLLM", server_bytes=2048 * MIB, settings=Settings(),
                           flashinfer_version="0.7.2.post1")
    assert dec.action == "ok" and dec.allocate_bytes == 2048 * MIB
    assert "ok, need 32.1 MiB <= 2048 MiB allocated" in dec.line
    assert "FLASHINFER_GUARD_WORKSPACE=exact would free 2015 MiB" in dec.line
