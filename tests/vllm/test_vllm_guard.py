"""vllm_guard against the real installed vLLM (one line per environment).

ci/vllm/run_tests.sh installs each vLLM line into its own environment and
runs this file with that environment's python; FLASHINFER_GUARD_VLLM_LINE
names the line under test. Every scenario runs in its own process
(scenarios.py says what is faked on this GPU-less machine, and why).
"""

from __future__ import annotations

import os

from conftest import MIB, uses

from guard_core.versions import version_lt

VLLM_DEFAULT = 394 * MIB
# the FlashInfer each vLLM line pins (shared/reference/installing-frameworks.md)
# (0.34.0 pins 0.7.3, absent from the registry: its lock installs 0.7.4 in its place, ci/lock.sh)
PINS = {"0.19.1": "0.6.6", "0.23.0": "0.6.12", "0.32.0": "0.7.0.post1", "0.33.0": "0.7.2.post1", "0.34.0": "0.7.4"}
# Qwen3.5-397B full attention (32 q / 2 KV heads, head_dim 256), CUDA-graph batch 512
SEED_PRE_FIX = 538_441_728  # FlashInfer <= 0.7.0.post1: batch_prefill_tmp_v + tmp_s
SEED_POST_FIX = 33_652_608  # FlashInfer >= 0.7.1 (PR #5177)


def vllm_would_allocate(vllm_version: str) -> int:
    """vLLM's own float workspace for the test deployment (8192 batched tokens)."""
    if version_lt(vllm_version, "0.26"):
        return VLLM_DEFAULT
    return max(VLLM_DEFAULT, 8192 * 32 * 256 * 16)


def moe_blocked_on_arm(fi: str) -> bool:
    return version_lt(fi, "0.6.16")


def route_map_oob(fi: str) -> bool:
    """FlashInfer before the route-map pad (#4237, cherry-picked as #4288: first in v0.6.16)."""
    return version_lt(fi, "0.6.16")


def workspace_short(fi: str) -> bool:
    return version_lt(fi, "0.7.1")


# --- the line under test -------------------------------------------------------

def test_line_under_test(versions):
    line = os.environ.get("FLASHINFER_GUARD_VLLM_LINE", versions["vllm"])
    assert versions["vllm"] == line
    if line in PINS:
        assert versions["flashinfer"] == PINS[line]


# --- loading ----------------------------------------------------------------------

@uses("discover")
def test_discovered_by_vllm_plugin_loader(pool):
    r = pool.get("discover").ok()
    assert ["flashinfer_guard", "vllm_guard.plugin:register"] in r["entry_points"]
    assert r["registered"] is True
    for target in ("vllm.utils.flashinfer", "vllm.v1.attention.backends.flashinfer", "vllm.engine.arg_utils"):
        assert target in r["hooks"]
    # register() imports nothing heavy and patches nothing yet
    assert r["heavy_imported_by_register"] == []
    assert r["preloaded"] == []


@uses("ws_twice", "ws")
def test_loading_twice_patches_once(pool):
    twice, once = pool.get("ws_twice"), pool.get("ws")
    r = twice.ok()
    assert r["wrapped"] is True and r["wrapped_twice"] is False
    assert r["allocated"] == once.ok()["allocated"]
    assert len(twice.lines("INFO", "workspace") + twice.lines("WARNING", "workspace")) == 1
    assert twice.lines("WARNING") == []


# --- MoE guard --------------------------------------------------------------------

@uses("moe_x86", "moe_baseline", "versions")
def test_moe_x86_auto_changes_nothing(pool, versions):
    run = pool.get("moe_x86")
    r, base = run.ok(), pool.get("moe_baseline").ok()
    # vLLM alone (SM100, FlashInfer's TRT-LLM MoE present) picks TRT-LLM: the premise of the
    # arm tests. Which kinds go there by default is the line's own choice (0.19 sends BF16
    # to TRT-LLM only through the env route, FP8 to CUTLASS); NVFP4 goes there on every line.
    assert base["has_trtllm"] is True and base["auto"]["nvfp4"] == "FLASHINFER_TRTLLM"
    assert r["has_trtllm"] is True
    assert r["auto"] == base["auto"]
    assert r["config_backend"] == "flashinfer_trtllm"
    assert r["explicit"] == base["explicit"]
    assert all(r["mxfp4"].values())
    fi = versions["flashinfer"]
    if route_map_oob(fi):
        # FlashInfer #4237/#4288: the route-map out-of-bounds read is in this release on every
        # host; the x86 default keeps the backend and says so once, naming the switch
        (warn,) = run.lines("WARNING")
        assert "[flashinfer-guard] moe:" in warn and "route-map-oob:" in warn and "#4237" in warn
        assert f"FlashInfer {fi} < 0.6.16 on SM100" in warn and "FLASHINFER_GUARD_MOE=strict" in warn
        return
    assert r["wrapped"] is False
    assert run.lines("WARNING") == []
    # the open BF16 reports: one INFO line when vLLM considers the BF16 TRT-LLM experts;
    # the shared gate's stand-down on x86 is a debug line
    info = run.lines("INFO", "moe")
    if base["auto"]["bf16"] == "FLASHINFER_TRTLLM":
        assert len(info) == 1 and "bf16-open:" in info[0] and "#4919" in info[0] and "bf16 MoE" in info[0]
    else:
        assert info == []


@uses("moe_arm", "moe_x86", "versions")
def test_moe_aarch64_auto(pool, versions):
    run = pool.get("moe_arm")
    r = run.ok()
    assert r["machine"] == "aarch64"
    if not moe_blocked_on_arm(versions["flashinfer"]):
        # FlashInfer with the fix: stand down, one ok line, vLLM unchanged
        assert r["wrapped"] is False
        assert r["auto"] == pool.get("moe_x86").ok()["auto"]
        assert r["config_backend"] == "flashinfer_trtllm"
        ok = [l for l in run.lines("INFO", "moe") if "moe: ok," in l]
        assert len(ok) == 1 and "moe: ok, aarch64 with FlashInfer" in ok[0] and ">= 0.6.16" in ok[0]
        assert run.lines("WARNING") == []
        return
    assert r["wrapped"] is True and r["has_trtllm"] is False and r["cache_clear"] is True
    # vLLM's real selection no longer picks TRT-LLM for BF16, FP8 and NVFP4
    for kind, backend in r["auto"].items():
        assert "TRTLLM" not in backend and not backend.startswith("raises"), (kind, backend)
    assert not any(r["mxfp4"].values())
    # every vLLM module that imported the function by name holds the wrapper
    assert r["holders"] and all(r["holders"].values())
    # the explicit --moe-backend flashinfer_trtllm is rewritten and passes selection ...
    assert r["config_backend"] == "auto"
    assert r["explicit"] == r["auto"]
    # ... where vLLM itself would raise at model build
    assert all(v == "raises ValueError" for v in r["explicit_unrewritten"].values())
    warn = run.lines("WARNING", "moe")
    assert len(warn) == 1
    assert f"aarch64 with FlashInfer {versions['flashinfer']} < 0.6.16" in warn[0]
    assert "--moe-backend flashinfer_trtllm replaced by auto" in warn[0]
    info = run.lines("INFO", "moe")
    assert any("TRT-LLM fused MoE reported unavailable" in l for l in info)
    assert len(info) == len(set(info))


@uses("moe_x86_on")
def test_moe_on_blocks_everywhere(pool):
    run = pool.get("moe_x86_on")
    r = run.ok()
    assert r["wrapped"] is True and r["has_trtllm"] is False
    for backend in r["auto"].values():
        assert "TRTLLM" not in backend and not backend.startswith("raises")
    assert r["config_backend"] == "auto" and r["explicit"] == r["auto"]
    assert "FLASHINFER_GUARD_MOE=on" in run.lines("WARNING", "moe")[0]


@uses("moe_arm_off", "moe_baseline")
def test_moe_off_leaves_vllm_alone(pool):
    run = pool.get("moe_arm_off")
    r = run.ok()
    assert r["wrapped"] is False
    assert r["auto"] == pool.get("moe_baseline").ok()["auto"]
    assert "FLASHINFER_TRTLLM" in r["auto"].values()
    assert run.lines("WARNING") == []


@uses("moe_env_route", "moe_env_route_baseline", "versions")
def test_moe_old_env_route(pool, versions):
    base = pool.get("moe_env_route_baseline").ok()
    run = pool.get("moe_env_route")
    r = run.ok()
    if not base["route_known"]:
        # the route is gone from this vLLM line (0.26+): vLLM ignores the variables, so do
        # we; the guard's own block applies as it does without them
        if moe_blocked_on_arm(versions["flashinfer"]):
            assert "TRTLLM" not in r["bf16"] and not r["bf16"].startswith("raises")
        else:
            assert r == base
        assert not any("VLLM_FLASHINFER_MOE_BACKEND" in l for l in run.lines("WARNING", "moe"))
        return
    assert base["bf16"] == "FLASHINFER_TRTLLM"  # vLLM alone follows the route to TRT-LLM
    if not moe_blocked_on_arm(versions["flashinfer"]):
        assert r == base
        return
    # vLLM's next choice: FlashInfer CUTLASS where the route's "throughput" is open to this
    # config (0.20+), Triton on 0.19 (its CUTLASS BF16 path needs expert parallelism)
    assert "TRTLLM" not in r["bf16"] and not r["bf16"].startswith("raises")
    warn = run.lines("WARNING", "moe")
    # 0.20+: the route's backend is rewritten to throughput; 0.19 asks a BF16 gate that the
    # guard answers "unsupported", and says the route is not followed
    assert len(warn) == 1 and "VLLM_FLASHINFER_MOE_BACKEND=latency (TRT-LLM)" in warn[0]
    assert ("replaced by throughput" in warn[0]) != ("not followed" in warn[0])


@uses("moe_mxfp4_route", "moe_mxfp4_route_baseline", "versions")
def test_moe_mxfp4_env_route(pool, versions):
    """VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1 on a guarded SM100 host: vLLM alone goes to
    the MXFP4 TRT-LLM experts; with the guard its oracle falls back to the next backend
    instead of raising, while vllm.envs itself still shows the user's value."""
    base = pool.get("moe_mxfp4_route_baseline").ok()
    run = pool.get("moe_mxfp4_route")
    r = run.ok()
    if not base["mxfp4_known"]:
        # the variable is gone from this vLLM line: ignored, as vLLM ignores it; the
        # guard's own block of the MXFP4 TRT-LLM experts applies as without it
        if moe_blocked_on_arm(versions["flashinfer"]):
            assert "TRTLLM" not in r["mxfp4"] and not r["mxfp4"].startswith("raises")
        else:
            assert r["mxfp4"] == base["mxfp4"]
        assert not any("VLLM_USE_FLASHINFER_MOE_MXFP4_BF16" in l for l in run.lines("WARNING", "moe"))
        return
    assert base["mxfp4"] == "FLASHINFER_TRTLLM_MXFP4_BF16"
    if not moe_blocked_on_arm(versions["flashinfer"]):
        assert r["mxfp4"] == base["mxfp4"] and not run.lines("WARNING", "moe")
        return
    assert r["mxfp4"] != base["mxfp4"] and not r["mxfp4"].startswith("raises")
    assert "TRTLLM" not in r["mxfp4"]
    assert r["envs_seen_elsewhere"] is True
    warn = [l for l in run.lines("WARNING", "moe") if "MXFP4" in l]
    assert len(warn) == 1 and "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1" in warn[0]


@uses("moe_broken_hook", "moe_arm_off")
def test_moe_hook_raising_fails_open(pool):
    run = pool.get("moe_broken_hook")
    r = run.ok()
    assert r["wrapped"] is False
    assert r["auto"] == pool.get("moe_arm_off").ok()["auto"]  # as without the guard
    warn = run.lines("WARNING")
    assert len(warn) == 1 and "internal error" in warn[0] and "injected fault" in warn[0]


# --- one test per evidence-table row, on vLLM's real selection code (issue 20) ---------------
# The expected backends are vLLM's own (the baseline scenarios, vLLM without the plugin)
# and the rules of the issue: Grace + SM10x + FlashInfer < 0.6.16 blocks; any host with
# SM10x < 0.6.16 warns (strict blocks); BF16 from 0.6.16 is an INFO line (strict skips its
# autotune sweep where vLLM can, else blocks BF16 only); nothing off SM10x.

BF16_OP = "flashinfer::trtllm_bf16_moe"  # FlashInfer fused_moe/core.py autotuner op name


def _no_trtllm(r):
    for kind, backend in r["auto"].items():
        assert "TRTLLM" not in backend and not backend.startswith("raises"), (kind, backend)
    assert not any(r["mxfp4"].values())


def _can_skip(base) -> bool:
    """Whether this vLLM's warm-up has a per-op autotune skip list (0.29+)."""
    return not str(base["skip_ops"]).startswith("absent")


@uses("moe_row_grace")
def test_row_route_map_oob_grace_blocks(pool):
    run = pool.get("moe_row_grace")
    r = run.ok()
    _no_trtllm(r)
    assert r["config_backend"] == "auto" and r["explicit"] == r["auto"]
    (warn,) = run.lines("WARNING", "moe")
    assert "aarch64 with FlashInfer 0.6.15.post1 < 0.6.16 on SM100" in warn
    assert "route-map-oob-grace:" in warn and "#46861" in warn and "replaced by auto" in warn


@uses("moe_row_any_host", "moe_baseline")
def test_row_route_map_oob_any_host_warns(pool):
    run = pool.get("moe_row_any_host")
    r, base = run.ok(), pool.get("moe_baseline").ok()
    assert r["auto"] == base["auto"] and r["mxfp4"] == base["mxfp4"]
    assert r["config_backend"] == "flashinfer_trtllm" and r["explicit"] == base["explicit"]
    (warn,) = run.lines("WARNING")
    assert "x86_64 with FlashInfer 0.6.15.post1 < 0.6.16 on SM100" in warn
    assert "route-map-oob:" in warn and "#4237" in warn and "FLASHINFER_GUARD_MOE=strict" in warn


@uses("moe_row_any_host_strict")
def test_row_route_map_oob_strict_blocks(pool):
    run = pool.get("moe_row_any_host_strict")
    r = run.ok()
    _no_trtllm(r)
    assert r["config_backend"] == "auto" and r["explicit"] == r["auto"]
    (warn,) = run.lines("WARNING", "moe")
    assert "FLASHINFER_GUARD_MOE=strict, evidence route-map-oob:" in warn and "replaced by auto" in warn


@uses("moe_row_any_host_b300_strict")
def test_row_route_map_oob_b300(pool):
    run = pool.get("moe_row_any_host_b300_strict")
    r = run.ok()
    assert r["cc"] == [10, 3]
    _no_trtllm(r)
    assert any("on SM103" in l and "route-map-oob:" in l for l in run.lines("INFO", "moe"))


@uses("moe_row_sm120_arm_strict", "moe_baseline_sm120")
def test_row_never_off_sm10x(pool):
    """RTX PRO 6000 (SM120) on an aarch64 host, strict, FlashInfer before the fix: the path
    is unreachable there; vLLM decides alone (its own error for an explicit request)."""
    run = pool.get("moe_row_sm120_arm_strict")
    r, base = run.ok(), pool.get("moe_baseline_sm120").ok()
    # (the shared gate may be wrapped before the GPU is known; it answers as vLLM's own)
    assert r["cc"] == [12, 0] and r["has_trtllm"] == base["has_trtllm"]
    assert r["auto"] == base["auto"] and r["mxfp4"] == base["mxfp4"]
    assert r["config_backend"] == base["config_backend"] == "flashinfer_trtllm"
    assert r["explicit"] == base["explicit"]
    assert run.lines("WARNING", "moe") == [] and run.lines("INFO", "moe") == []


@uses("moe_row_bf16", "moe_baseline")
def test_row_bf16_open_default_only_says_so(pool):
    run = pool.get("moe_row_bf16")
    r, base = run.ok(), pool.get("moe_baseline").ok()
    assert r["auto"] == base["auto"] and r["skip_ops"] == base["skip_ops"]
    assert run.lines("WARNING") == []
    info = run.lines("INFO", "moe")
    if base["auto"]["bf16"] != "FLASHINFER_TRTLLM":
        assert info == []  # vLLM never considers the BF16 TRT-LLM experts here
        return
    (line,) = info
    assert "FlashInfer 0.6.17 on SM100, bf16 MoE" in line and "bf16-open:" in line
    for ref in ("#4919", "#30209", "#7004", "#4157"):
        assert ref in line


@uses("moe_row_bf16_strict", "moe_baseline")
def test_row_bf16_open_strict(pool):
    run = pool.get("moe_row_bf16_strict")
    r, base = run.ok(), pool.get("moe_baseline").ok()
    if _can_skip(base):
        # vLLM 0.29+: BF16 stays on TRT-LLM, its autotune sweep is skipped, vLLM's own
        # default skips kept
        assert r["auto"] == base["auto"] and r["config_backend"] == "flashinfer_trtllm"
        assert BF16_OP in r["skip_ops"] and set(r["skip_ops"]) - {BF16_OP} == set(base["skip_ops"] or ())
        assert run.lines("WARNING", "moe") == []
        assert any("skipping its autotune sweep" in l and "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS" in l
                   for l in run.lines("INFO", "moe"))
        return
    # no per-op skip on this line: BF16 leaves TRT-LLM, the other ops stay where vLLM puts them
    assert "TRTLLM" not in r["auto"]["bf16"] and not r["auto"]["bf16"].startswith("raises")
    assert r["auto"]["fp8"] == base["auto"]["fp8"] and r["auto"]["nvfp4"] == base["auto"]["nvfp4"]
    assert r["config_backend"] == "auto"  # the test model is BF16
    (warn,) = run.lines("WARNING", "moe")
    assert "bf16-open:" in warn and "replaced by auto" in warn


@uses("moe_row_bf16_strict_user", "moe_baseline")
def test_row_bf16_strict_keeps_the_users_skip_list(pool):
    run = pool.get("moe_row_bf16_strict_user")
    r, base = run.ok(), pool.get("moe_baseline").ok()
    if not _can_skip(base):
        assert "TRTLLM" not in r["auto"]["bf16"]
        return
    assert r["skip_ops"] == ["fp4_gemm"]  # the user's value, as vLLM parses it
    assert r["auto"] == base["auto"]
    assert any("kept as set" in l for l in run.lines("INFO", "moe"))


# --- workspace guard -----------------------------------------------------------------

@uses("ws", "ws_baseline", "versions")
def test_workspace_exact_need(pool, versions):
    run = pool.get("ws")
    r = run.ok()
    base = pool.get("ws_baseline").ok()
    server = vllm_would_allocate(versions["vllm"])
    # the deployment really is the one described: graphs up to 512, no TRT-LLM decode
    assert r["heads"] == [32, 2, 256] and r["use_trtllm_decode"] is False
    assert r["decode_cudagraph_max_bs"] == 512 and r["capture_max"] == 512
    assert base["allocated"] == server  # vLLM alone
    assert r["device"] == "cpu" and r["same_buffer"] is True
    core = r["core"]
    need_rounded = -(-core["need"] // MIB) * MIB
    assert r["allocated"] == max(server, need_rounded)
    lines = run.lines("INFO", "workspace") + run.lines("WARNING", "workspace")
    assert len(lines) == 1
    if workspace_short(versions["flashinfer"]):
        assert core["graph512"] == SEED_PRE_FIX == core["need"]
        assert core["dominant"] == "cuda_graph_decode" and core["dominant_batch"] == 512
        if server == VLLM_DEFAULT:  # up to vLLM 0.25: raised
            assert r["allocated"] == 514 * MIB
            assert lines[0].startswith("INFO") and "raising 394 MiB -> 514 MiB" in lines[0]
            assert (f"FlashInfer {versions['flashinfer']} prefill planner needs 513.5 MiB "
                    "at CUDA-graph batch 512") in lines[0]
            assert "32 q / 2 kv heads per rank, head_dim 256, 142 SMs" in lines[0]
        else:  # vLLM 0.26+: its 1 GiB heuristic at 8192 tokens covers batch 512
            assert r["allocated"] == server == base["allocated"]
            assert "workspace: ok, need 513.5 MiB <= 1024 MiB allocated" in lines[0]
    elif version_lt(versions["flashinfer"], "0.7.4"):
        assert core["graph512"] == SEED_POST_FIX
        assert r["allocated"] == server == base["allocated"]  # vLLM's own size kept
        assert "workspace: ok, need 32.1 MiB <=" in lines[0]
    else:
        # FlashInfer 0.7.4's decode wrapper plans CUDA-graph decode with fixed_uniform_q_len (no KV
        # split past the split budget: guard_core/flashinfer/planner.py's release table, held to 0.7.4's
        # compiled planner by tests/conformance): batch 512 here plans no split scratch
        assert core["graph512"] == 0
        assert r["allocated"] == server == base["allocated"]
        assert "workspace: ok, need " in lines[0]
    assert run.lines("WARNING") == []


@uses("ws1024", "versions")
def test_workspace_capture_1024(pool, versions):
    """--max-num-seqs 1024 --max-cudagraph-capture-size 1024 (the SM100 default cap from vLLM 0.31):
    the old planner needs 1027.5 MiB, above even vLLM 0.26+'s 1 GiB heuristic at 8192 tokens."""
    run = pool.get("ws1024")
    r = run.ok()
    assert r["decode_cudagraph_max_bs"] == 1024 and max(r["core"]["capture_sizes"]) == 1024
    server = vllm_would_allocate(versions["vllm"])
    need_rounded = -(-r["core"]["need"] // MIB) * MIB
    assert r["allocated"] == max(server, need_rounded)
    lines = run.lines("INFO", "workspace")
    assert len(lines) == 1 and run.lines("WARNING") == []
    if workspace_short(versions["flashinfer"]):
        assert r["core"]["need"] == 1_077_409_792  # 1027.5 MiB at CUDA-graph batch 1024
        assert r["allocated"] == 1028 * MIB > server
        assert f"raising {server // MIB} MiB -> 1028 MiB" in lines[0]
    else:
        assert r["allocated"] == server and "workspace: ok, need" in lines[0]


@uses("ws_user_small", "ws", "versions")
def test_workspace_user_size_too_small_is_raised(pool, versions):
    run = pool.get("ws_user_small")
    r = run.ok()
    want = pool.get("ws").ok()["allocated"]
    vllm_alone = max(400 * MIB, vllm_would_allocate(versions["vllm"]))
    if want > vllm_alone:  # FlashInfer < 0.7.1 with vLLM's fixed default: raised, with a warning
        assert r["allocated"] == want == 514 * MIB
        warn = run.lines("WARNING")
        assert len(warn) == 1
        assert "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=400 MiB is too small" in warn[0]
        assert "400 MiB -> 514 MiB" in warn[0]
    else:
        assert r["allocated"] == vllm_alone
        assert run.lines("WARNING") == []


@uses("ws_user_big")
def test_workspace_user_size_big_enough_is_kept(pool):
    run = pool.get("ws_user_big")
    r = run.ok()
    assert r["allocated"] == 1536 * MIB
    assert run.lines("WARNING") == []
    ok = run.lines("INFO", "workspace")
    assert len(ok) == 1 and "ok, need" in ok[0] and "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=1536 MiB" in ok[0]


@uses("ws_size")
def test_workspace_explicit_size(pool):
    run = pool.get("ws_size")
    assert run.ok()["allocated"] == 1600 * MIB
    assert len(run.lines("INFO", "workspace")) == 1 and run.lines("WARNING") == []


@uses("ws_off", "ws_disabled", "versions")
def test_workspace_off_and_master_switch(pool, versions):
    server = vllm_would_allocate(versions["vllm"])
    off = pool.get("ws_off")
    assert off.ok()["allocated"] == server and off.ok()["wrapped"] is False
    assert len(off.lines("INFO", "workspace")) == 1 and off.lines("WARNING") == []
    disabled = pool.get("ws_disabled")
    assert disabled.ok()["allocated"] == server and disabled.ok()["wrapped"] is False
    assert disabled.guard_lines == []


@uses("ws_shared", "versions")
def test_workspace_shared_buffer_too_small(pool, versions):
    r = pool.get("ws_shared").ok()
    need_rounded = -(-r["core"]["need"] // MIB) * MIB
    assert r["kept_shared"] is True  # one buffer, grown in place, never a copy per builder
    if need_rounded > 394 * MIB:  # the shared 394 MiB buffer cannot hold this builder's plans
        # grown to the need, or to what this vLLM line itself allocates where that is more
        # (0.26+: the max_num_batched_tokens x heads x head_dim x 16 floor, 1 GiB here)
        want = max(need_rounded, vllm_would_allocate(versions["vllm"]))
        assert r["allocated"] == want
        assert r["other_holder_bytes"] == want  # every holder sees the grown buffer
    else:
        assert r["kept_shared"] is True and r["allocated"] == 394 * MIB


# --- faults: vLLM behaves as without us, one warning where something was wrong -------

@uses("ws_bad_value", "ws")
def test_bad_setting_value(pool):
    run = pool.get("ws_bad_value")
    assert run.ok()["allocated"] == pool.get("ws").ok()["allocated"]  # the default (auto) applies
    warn = run.lines("WARNING")
    assert len(warn) == 1 and "FLASHINFER_GUARD_WORKSPACE" in warn[0] and "'plenty'" in warn[0]


@uses("ws_no_gpu", "versions")
def test_no_torch_device_properties(pool, versions):
    run = pool.get("ws_no_gpu")
    assert run.ok()["allocated"] == vllm_would_allocate(versions["vllm"])
    warn = run.lines("WARNING")
    assert len(warn) == 1 and "no GPU properties" in warn[0]


@uses("ws_broken_hook", "versions")
def test_workspace_hook_raising_fails_open(pool, versions):
    run = pool.get("ws_broken_hook")
    assert run.ok()["allocated"] == vllm_would_allocate(versions["vllm"])
    warn = run.lines("WARNING")
    assert len(warn) == 1 and "internal error" in warn[0] and "injected fault" in warn[0]


@uses("ws_renamed", "versions")
def test_workspace_target_renamed(pool, versions):
    run = pool.get("ws_renamed")
    r = run.ok()
    assert r["allocated"] == vllm_would_allocate(versions["vllm"])
    warn = run.lines("WARNING")
    if workspace_short(versions["flashinfer"]):  # the guard is needed here: one warning naming target and line
        assert len(warn) == 1 and "_get_workspace_buffer not found on vLLM" in warn[0]
        assert f"vLLM {versions['vllm']}" in warn[0] and "where the guard is needed" in warn[0]
    else:  # FlashInfer >= 0.7.1: nothing needed, nothing said at INFO
        assert warn == [] and run.lines("INFO", "workspace") == []


@uses("environ", "environ_control")
def test_env_validation_accepts_our_variables(pool):
    run = pool.get("environ")
    r = run.ok()
    assert r["ok"] is True, r
    assert "Unknown vLLM environment variable" not in run.output
    assert run.lines("WARNING") == []
    # the check is live: a VLLM_-prefixed name would have been refused
    control = pool.get("environ_control").ok()
    assert control["ok"] is False and "VLLM_FLASHINFER_GUARD_WORKSPACE" in control["error"]


@uses("ws_too_big", "versions")
def test_workspace_size_the_device_cannot_hold_falls_back(pool, versions):
    """FLASHINFER_GUARD_WORKSPACE=200GiB on a device with 8 GiB free: the server starts with
    its own size (as without the guard) and one warning says why."""
    run = pool.get("ws_too_big")
    assert run.ok()["allocated"] == vllm_would_allocate(versions["vllm"])
    warn = run.lines("WARNING")
    assert len(warn) == 1 and "cannot hold 204800 MiB" in warn[0], warn
