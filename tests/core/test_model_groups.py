"""Attention layer groups: the built-in reader over real published config.json files, plan's
per-group sizing, and plan options against their launch-command twins.

Expected values come from the published configs' own fields (each model's config.json in
tests/data/model_configs, sources in sources.json), from another published config (llava-1.5's
language model is Llama-2-7B), or from plan itself in another of its forms (an option and its
launch-command twin must give the same answer) - never from guard_core's reader.
The comparison with vLLM's and SGLang's own readings runs in their environments
(tests/vllm/test_model_groups.py, tests/sglang/test_model_groups.py).
"""

import io
import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from guard_core.commands import cli
from guard_core.deployment.presets import ModelError, load_model

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "model_configs")


def corpus() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(CORPUS) if f.endswith(".json") and f != "sources.json")


def cfg_of(name: str) -> dict:
    with open(os.path.join(CORPUS, name + ".json")) as fh:
        return json.load(fh)


def text_of(cfg: dict) -> dict:
    for k in ("text_config", "llm_config", "language_config"):
        if isinstance(cfg.get(k), dict) and cfg[k]:
            return cfg[k]
    return cfg


def groups_of(name: str, tp: int = 1):
    return load_model(os.path.join(CORPUS, name + ".json")).model_groups().per_rank(tp)


def by_kind(groups, kind):
    return [g for g in groups if g.kind == kind]


def plan_json(*args):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(["plan", "--json", "--model-reader", "builtin", *args])
    finally:
        sys.stdout, sys.stderr = old
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


# --- the corpus ---------------------------------------------------------------------------

def test_corpus_has_50_real_configs_each_with_its_source():
    with open(os.path.join(CORPUS, "sources.json")) as fh:
        sources = json.load(fh)
    names = corpus()
    assert len(names) >= 50
    assert set(names) == set(sources)
    for n in names:
        s = sources[n]
        assert s["repo"] and len(s["commit"]) == 40 and s["path"] and "/" in s["hf_id"], n


@pytest.mark.parametrize("name", corpus())
def test_every_corpus_config_reads_or_refuses_in_one_line(name):
    path = os.path.join(CORPUS, name + ".json")
    try:
        facts = load_model(path)
    except ModelError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600
        return
    mg = facts.model_groups()
    assert mg.groups, name
    layers = mg.num_layers
    # every layer is in exactly one group or counted as running no FlashInfer attention
    assert mg.attention_layers + sum(n for _, n in mg.other_layers) == layers, (name, mg)
    for g in mg.groups:
        assert g.num_qo_heads % g.num_kv_heads == 0 or g.kind == "mla"


# --- the layouts the issue names, from each config's own fields -----------------------------

@pytest.mark.parametrize("name", ["gemma-4-26B-A4B", "Gemma-4-31B-IT-NVFP4"])
def test_gemma4_full_layers_have_their_own_heads_and_head_dim(name):
    t = text_of(cfg_of(name))
    gs = groups_of(name)
    full, sliding = by_kind(gs, "full"), by_kind(gs, "sliding")
    assert len(full) == 1 and len(sliding) == 1
    assert full[0].count == t["layer_types"].count("full_attention")
    assert sliding[0].count == t["layer_types"].count("sliding_attention")
    assert (full[0].head_dim_qk, full[0].num_kv_heads) == (t["global_head_dim"], t["num_global_key_value_heads"])
    assert (sliding[0].head_dim_qk, sliding[0].num_kv_heads) == (t["head_dim"], t["num_key_value_heads"])
    assert sliding[0].window == t["sliding_window"]


def test_mimo_v2_flash_sliding_layers_have_their_own_heads_and_sinks():
    c = cfg_of("MiMo-V2-Flash")
    gs = groups_of("MiMo-V2-Flash")
    (swa,) = by_kind(gs, "sliding")
    (full,) = by_kind(gs, "full")
    assert swa.count == sum(c["hybrid_layer_pattern"]) and full.count == c["num_hidden_layers"] - swa.count
    assert (swa.num_qo_heads, swa.num_kv_heads, swa.head_dim_qk, swa.head_dim_vo) == (
        c["swa_num_attention_heads"], c["swa_num_key_value_heads"], c["swa_head_dim"], c["swa_v_head_dim"])
    assert swa.sinks is bool(c["add_swa_attention_sink_bias"]) and full.sinks is bool(c["add_full_attention_sink_bias"])
    assert (full.num_kv_heads, full.head_dim_vo) == (c["num_key_value_heads"], c["v_head_dim"])


def test_nemotron_super_block_configs():
    c = cfg_of("Llama-3_3-Nemotron-Super-49B-v1")
    assert c["num_key_value_heads"] is None
    attn = [b["attention"] for b in c["block_configs"] if not b["attention"]["no_op"]]
    kvs = {c["num_attention_heads"] // a["n_heads_in_group"] for a in attn}
    gs = groups_of("Llama-3_3-Nemotron-Super-49B-v1")
    assert sum(g.count for g in gs) == len(attn) < c["num_hidden_layers"]
    assert {g.num_kv_heads for g in gs} == kvs == {8}
    assert {g.num_kv_heads for g in groups_of("Llama-3_3-Nemotron-Super-49B-v1", 8)} == {1}


@pytest.mark.parametrize("name", ["Nemotron-H-56B-Base-8K", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                  "NVIDIA-Nemotron-3-Super-120B-A12B-FP8"])
def test_nemotron_h_counts_only_attention_layers(name):
    c = cfg_of(name)
    (g,) = groups_of(name)
    assert g.count == c["hybrid_override_pattern"].count("*")
    assert g.num_kv_heads == c["num_key_value_heads"]


def test_chatglm_multi_query_group_num():
    c = cfg_of("chatglm3-6b")
    facts = load_model(os.path.join(CORPUS, "chatglm3-6b.json"))
    (g,) = facts.model_groups().per_rank(1)
    assert (g.num_qo_heads, g.num_kv_heads, g.head_dim_qk, g.count) == (
        c["num_attention_heads"], c["multi_query_group_num"], c["kv_channels"], c["num_layers"])
    assert facts.model_groups().max_len == c["seq_length"]


def test_llava_text_config_defaults_are_llama2_7b():
    # llava-1.5-7b's language model is Llama-2-7B: its text_config leaves the Llama fields out
    t = cfg_of("llava-1.5-7b-hf")["text_config"]
    assert "num_attention_heads" not in t and "num_hidden_layers" not in t
    for tp in (1, 8):
        assert [g.key for g in groups_of("llava-1.5-7b-hf", tp)] == [g.key for g in groups_of("Llama-2-7b-hf", tp)]


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_sinks_and_sliding(name):
    c = cfg_of(name)
    gs = groups_of(name)
    assert all(g.sinks for g in gs)
    (sl,) = by_kind(gs, "sliding")
    assert sl.count == c["layer_types"].count("sliding_attention") and sl.window == c["sliding_window"]


@pytest.mark.parametrize("name", ["Llama-4-Scout-17B-16E-Instruct", "Llama-4-Maverick-17B-128E-Instruct"])
def test_llama4_chunked_attention(name):
    t = text_of(cfg_of(name))
    (ch,) = by_kind(groups_of(name), "chunked")
    (full,) = by_kind(groups_of(name), "full")
    assert ch.window == t["attention_chunk_size"]
    nope = t.get("no_rope_layers")
    assert full.count == (nope.count(0) if nope else t["num_hidden_layers"] // 4)


@pytest.mark.parametrize("name", ["Qwen3.5-397B-A17B", "Qwen3.5-27B", "Qwen3-Next-80B-A3B-Thinking"])
def test_hybrid_linear_attention_layers_are_not_sized(name):
    t = text_of(cfg_of(name))
    (g,) = groups_of(name)
    types = t.get("layer_types")
    expect = types.count("full_attention") if types else t["num_hidden_layers"] // t["full_attention_interval"]
    assert g.count == expect < t["num_hidden_layers"]


@pytest.mark.parametrize("name", ["DeepSeek-V3", "DeepSeek-R1", "DeepSeek-V2-Lite", "Kimi-K2-Instruct", "GLM-5"])
def test_mla_models_are_not_applicable(name):
    assert load_model(os.path.join(CORPUS, name + ".json")).uses_mla
    r = plan_json("--model", os.path.join(CORPUS, name + ".json"))
    assert r["verdict"] == "not_applicable"


def test_minicpm3_is_ordinary_attention_not_mla():
    # MiniCPM3-4B's published attention fields (openbmb/MiniCPM3-4B config.json); vLLM runs it
    # with Attention(num_heads, qk_nope + qk_rope, num_kv_heads=num_heads) (models/minicpm3.py)
    cfg = {"architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3", "hidden_size": 2560,
           "num_attention_heads": 40, "num_key_value_heads": 40, "num_hidden_layers": 62, "q_lora_rank": 768,
           "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
           "max_position_embeddings": 32768}
    from guard_core.deployment.presets import facts_from_config

    f = facts_from_config(cfg, "MiniCPM3-4B")
    assert not f.uses_mla
    (g,) = f.model_groups().per_rank(1)
    assert (g.num_qo_heads, g.num_kv_heads, g.head_dim_qk, g.count) == (40, 40, 64 + 32, 62)


# --- plan: every group sized, the largest kept -------------------------------------------

def test_plan_need_is_the_largest_group_need_gemma4():
    path = os.path.join(CORPUS, "gemma-4-26B-A4B.json")
    common = ["--framework-version", "0.19.1", "--gpu", "h100"]
    r = plan_json("--model", path, *common)
    assert len(r["groups"]) == 2
    assert r["need"]["float_bytes"] == max(g["need_bytes"] for g in r["groups"])
    # each group's need is plan's need for that shape given as raw heads (another form of plan)
    for g in r["groups"]:
        raw = plan_json("--qo-heads", str(g["num_qo_heads"]), "--kv-heads", str(g["num_kv_heads"]),
                        "--head-dim", str(g["head_dim_qk"]), *common)
        assert raw["need"]["float_bytes"] == g["need_bytes"]
    # the old single-shape reading (16 q / 8 kv / 256 everywhere) under-estimated
    old = plan_json("--qo-heads", "16", "--kv-heads", "8", "--head-dim", "256", *common)
    assert r["need"]["float_bytes"] > 2 * old["need"]["float_bytes"]
    assert r["workspace_bytes"] - r["need"]["float_bytes"] < 10 * (1 << 20)  # the real margin: under 10 MiB


def test_text_report_prints_each_group_and_its_kind():
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        assert cli.main(["plan", "--model-reader", "builtin", "--model",
                         os.path.join(CORPUS, "gemma-4-26B-A4B.json")]) == 0
        assert cli.main(["plan", "--model-reader", "builtin", "--model",
                         os.path.join(CORPUS, "Qwen3.5-397B-A17B.json")]) == 0
    finally:
        sys.stdout, sys.stderr = old
    text = out.getvalue()
    assert "25 layers sliding window 1024" in text and "5 layers full attention" in text
    assert "hybrid share: 15 of 60 layers" in text and "45 layers linear attention" in text


# --- plan options and their launch-command twins ------------------------------------------

def test_kv_dtype_bytes_and_kv_cache_dtype_agree_on_vllm_023_h100():
    path = os.path.join(CORPUS, "Qwen3-32B.json")
    common = ["--framework-version", "0.23.0", "--gpu", "h100"]
    a = plan_json("--model", path, "--kv-dtype-bytes", "1", *common)
    b = plan_json("--model", path, "--kv-cache-dtype", "fp8", *common)
    c = plan_json(*common, "--", "vllm", "serve", path, "--kv-cache-dtype", "fp8")
    assert a["planners"]["prefill"] == b["planners"]["prefill"] == c["planners"]["prefill"] == "fa2"
    assert a["need"] == b["need"] == c["need"]


@pytest.mark.parametrize("line", ["0.26.0", "0.29.0", "0.32.0", "0.33.0"])
@pytest.mark.parametrize("gpu", ["h100", "b200", "l40s"])
@pytest.mark.parametrize("kv", ["auto", "fp8"])
def test_no_unknown_query_dtype_where_the_line_rule_is_known(line, gpu, kv):
    r = plan_json("--model", "Qwen3-32B", "--framework-version", line, "--gpu", gpu, "--kv-cache-dtype", kv)
    assert not [m for m in r["planner_missing"] if "query dtype" in m], r["planner_missing"]
    assert not any("query dtype" in n for n in r["planner_notes"])


# option -> (plan flag, value strategy, vLLM launch flag)
_TWINS = {
    "tp": ("--tp", st.sampled_from([1, 2, 4, 8]), "--tensor-parallel-size"),
    "seqs": ("--max-num-seqs", st.sampled_from([16, 128, 256, 1024]), "--max-num-seqs"),
    "tokens": ("--max-batched-tokens", st.sampled_from([2048, 8192, 16384]), "--max-num-batched-tokens"),
    "len": ("--max-model-len", st.sampled_from([4096, 32768]), "--max-model-len"),
    "page": ("--page-size", st.sampled_from([16, 32]), "--block-size"),
    "kv": ("--kv-cache-dtype", st.sampled_from(["auto", "fp8", "fp8_e4m3"]), "--kv-cache-dtype"),
    "cap": ("--max-capture-batch", st.sampled_from([64, 256, 512]), "--max-cudagraph-capture-size"),
    "eager": ("--no-cuda-graph", st.just(True), "--enforce-eager"),
}


def _args(choice, plan_side: bool):
    out = []
    for key, val in choice.items():
        flag, _, launch_flag = _TWINS[key]
        f = flag if plan_side else launch_flag
        out += [f] if val is True else [f, str(val)]
    return out


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choice=st.fixed_dictionaries({}, optional={k: v[1] for k, v in _TWINS.items()}),
       model=st.sampled_from(["gemma-4-26B-A4B", "Qwen3-32B", "MiMo-V2-Flash", "gpt-oss-20b"]),
       gpu=st.sampled_from(["h100", "b200"]), line=st.sampled_from(["0.23.0", "0.33.0"]))
def test_property_plan_options_and_launch_twins_agree(choice, model, gpu, line):
    path = os.path.join(CORPUS, model + ".json")
    common = ["--framework-version", line, "--gpu", gpu]
    try:
        a = plan_json("--model", path, *common, *_args(choice, True))
    except AssertionError:  # a combination plan refuses (heads not divisible by --tp): the twin must too
        with pytest.raises(AssertionError):
            plan_json(*common, "--", "vllm", "serve", path, *_args(choice, False))
        return
    b = plan_json(*common, "--", "vllm", "serve", path, *_args(choice, False))
    for key in ("need", "verdict", "planners", "layout", "limits", "groups", "workspace_bytes"):
        assert a[key] == b[key], (key, choice)


@pytest.mark.parametrize("model", ["gemma-4-26B-A4B", "MiMo-V2-Flash"])
def test_every_option_at_once_and_its_launch_twin_agree(model):
    path = os.path.join(CORPUS, model + ".json")
    choice = {"tp": 2, "seqs": 256, "tokens": 16384, "len": 32768, "page": 32, "kv": "fp8", "cap": 256}
    common = ["--framework-version", "0.23.0", "--gpu", "h100"]
    a = plan_json("--model", path, *common, *_args(choice, True))
    b = plan_json(*common, "--", "vllm", "serve", path, *_args(choice, False))
    assert a["layout"]["tp"] == 2 and a["limits"]["max_num_seqs"] == 256 and a["layout"]["page_size"] == 32
    for key in ("need", "verdict", "planners", "layout", "limits", "groups", "workspace_bytes"):
        assert a[key] == b[key], key


def test_sglang_plans_every_layer_with_the_full_layers_shape():
    # SGLang's FlashInfer backend plans one shape for every layer (flashinfer_backend.py
    # FlashInferIndicesUpdaterDecode: max query heads, the model's KV heads and head dim);
    # for Gemma 4 that is the full layers' (global) shape on all of its layers
    t = text_of(cfg_of("gemma-4-26B-A4B"))
    r = plan_json("--model", os.path.join(CORPUS, "gemma-4-26B-A4B.json"), "--framework", "sglang", "--gpu", "h100")
    (g,) = r["groups"]
    assert (g["num_qo_heads"], g["num_kv_heads"], g["head_dim_qk"], g["count"]) == (
        t["num_attention_heads"], t["num_global_key_value_heads"], t["global_head_dim"], t["num_hidden_layers"])


# the same property for SGLang's launch command (python -m sglang.launch_server --model-path ...)
_SGL_TWINS = {
    "tp": ("--tp", st.sampled_from([1, 2, 8]), "--tp-size"),
    "seqs": ("--max-num-seqs", st.sampled_from([16, 128, 512]), "--max-running-requests"),
    "tokens": ("--max-batched-tokens", st.sampled_from([4096, 8192]), "--chunked-prefill-size"),
    "len": ("--max-model-len", st.sampled_from([4096, 32768]), "--context-length"),
    "page": ("--page-size", st.sampled_from([1, 16]), "--page-size"),
    "kv": ("--kv-cache-dtype", st.sampled_from(["auto", "fp8_e4m3"]), "--kv-cache-dtype"),
    "cap": ("--max-capture-batch", st.sampled_from([64, 256]), "--cuda-graph-max-bs"),
    "eager": ("--no-cuda-graph", st.just(True), "--disable-cuda-graph"),
}


def _sgl_args(choice, plan_side: bool, line: str = "0.5.5"):
    out = []
    for key, val in choice.items():
        flag, _, launch_flag = _SGL_TWINS[key]
        f = flag if plan_side else launch_flag
        if not plan_side and f == "--cuda-graph-max-bs" and line == "0.5.23":
            # SGLang 0.5.23 has per-phase options and refuses the old spelling as ambiguous
            # (argparse prefix of --cuda-graph-max-bs-decode / -prefill)
            f = "--cuda-graph-max-bs-decode"
        out += [f] if val is True else [f, str(val)]
    return out


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choice=st.fixed_dictionaries({}, optional={k: v[1] for k, v in _SGL_TWINS.items()}),
       model=st.sampled_from(["gemma-4-26B-A4B", "Qwen3-32B", "MiMo-V2-Flash"]),
       line=st.sampled_from(["0.5.5", "0.5.23"]))
def test_property_sglang_plan_options_and_launch_twins_agree(choice, model, line):
    path = os.path.join(CORPUS, model + ".json")
    common = ["--framework-version", line, "--gpu", "h100"]
    launch = ["python", "-m", "sglang.launch_server", "--model-path", path]
    try:
        a = plan_json("--model", path, "--framework", "sglang", *common, *_sgl_args(choice, True))
    except AssertionError:
        with pytest.raises(AssertionError):
            plan_json(*common, "--", *launch, *_sgl_args(choice, False, line))
        return
    b = plan_json(*common, "--", *launch, *_sgl_args(choice, False, line))
    for key in ("need", "verdict", "planners", "layout", "limits", "groups", "workspace_bytes"):
        assert a[key] == b[key], (key, choice)


def test_sglang_every_option_at_once_and_its_launch_twin_agree():
    path = os.path.join(CORPUS, "MiMo-V2-Flash.json")
    choice = {"tp": 2, "seqs": 128, "tokens": 4096, "len": 32768, "page": 16, "kv": "fp8_e4m3", "cap": 64}
    common = ["--framework-version", "0.5.5", "--gpu", "h100"]
    a = plan_json("--model", path, "--framework", "sglang", *common, *_sgl_args(choice, True))
    b = plan_json(*common, "--", "python", "-m", "sglang.launch_server", "--model-path", path,
                  *_sgl_args(choice, False))
    # --page-size 16 is passed; the layout sized is FlashInfer's page size 1: SGLang flattens its
    # pages into token indices (flashinfer_backend.py 0.5.5:1071,1090,1379; issue 27)
    assert a["layout"]["tp"] == 2 and a["limits"]["max_num_seqs"] == 128 and a["layout"]["page_size"] == 1
    for key in ("need", "verdict", "planners", "layout", "limits", "groups", "workspace_bytes"):
        assert a[key] == b[key], key


def test_doctor_model_prints_the_builtin_reading():
    out = io.StringIO()
    assert cli.run_doctor(out=out, model=os.path.join(CORPUS, "gemma-4-26B-A4B.json"), tp=2) == 0
    line = [ln for ln in out.getvalue().splitlines() if ln.startswith("model ") and "built-in reader" in ln]
    t = text_of(cfg_of("gemma-4-26B-A4B"))
    assert line and f"{t['layer_types'].count('full_attention')} x full 8/1/{t['global_head_dim']}" in line[0]


@pytest.mark.parametrize("kv, prefill", [("fp8_e5m2", "fa2"), ("fp8_e4m3", "trtllm")])
def test_vllm_026_query_dtype_is_the_kv_cache_dtype_itself(kv, prefill):
    # vLLM 0.26+: an FP8 query is the KV cache's dtype; use_trtllm_attention(is_prefill=True) takes
    # it only when it is current_platform.fp8_dtype(), e4m3 (vllm/utils/flashinfer.py 0.33.0:724-810)
    r = plan_json("--model", "Qwen3-32B", "--framework-version", "0.33.0", "--gpu", "b200",
                  "--trtllm-attention", "on", "--kv-cache-dtype", kv)
    assert r["planners"]["prefill"] == prefill and not r["planner_missing"]


def test_transformers_reader_alone_refuses_in_one_line_where_transformers_is_absent(tmp_path, monkeypatch):
    """``--model-reader transformers`` asks transformers' config classes alone; where transformers
    is not installed (the core environment), plan ends in one line saying so, exit 2, and does not
    fall back to another reader (the user asked for this one)."""
    import importlib.util

    from guard_core.deployment import model_readers

    real = importlib.util.find_spec
    monkeypatch.setattr(model_readers.importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8,
                                "hidden_size": 4096, "num_hidden_layers": 2}))
    from contextlib import redirect_stderr, redirect_stdout

    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = cli.main(["plan", "--model-reader", "transformers", "--model", str(path)])
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "no reader for --model-reader transformers" in lines[0], lines
