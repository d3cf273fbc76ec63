"""Model ids through the local Hugging Face cache (offline), then the presets."""

import json
import os
import subprocess
import sys
import time

from guard_core.deployment.hf_cache import cache_dirs, find_config, looks_like_model_id

CFG = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 40, "num_key_value_heads": 5,
       "head_dim": 128, "num_hidden_layers": 4, "max_position_embeddings": 8192}


def make_cache(root, model_id, rev="abc123", cfg=CFG, refs=True):
    org, name = model_id.split("/")
    repo = root / f"models--{org}--{name}"
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(cfg))
    if refs:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
    return snap / "config.json"


def test_ids():
    assert looks_like_model_id("Qwen/Qwen3-32B") and looks_like_model_id("nvidia/Qwen3.5-397B-A17B-NVFP4")
    assert not looks_like_model_id("Qwen3-32B") and not looks_like_model_id("../etc/passwd")
    assert not looks_like_model_id("a/../b")


def test_cache_dirs_order(tmp_path):
    env = {"HF_HUB_CACHE": "/x/hub", "HF_HOME": "/y", "XDG_CACHE_HOME": "/z"}
    d = cache_dirs(env)
    assert d[:3] == ["/x/hub", "/y/hub", "/z/huggingface/hub"]
    assert d[-1].endswith(os.path.join(".cache", "huggingface", "hub"))


def test_hub_cache_env(tmp_path):
    p = make_cache(tmp_path / "hub", "acme/Model-1")
    path, looked = find_config("acme/Model-1", environ={"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert path == str(p) and looked == [str(tmp_path / "hub")]


def test_hf_home_and_refs_main_wins(tmp_path):
    make_cache(tmp_path / "home" / "hub", "acme/M", rev="old")
    time.sleep(0.01)
    newest = make_cache(tmp_path / "home" / "hub", "acme/M", rev="new", refs=False)
    (tmp_path / "home" / "hub" / "models--acme--M" / "refs" / "main").write_text("old")
    path, _ = find_config("acme/M", environ={"HF_HOME": str(tmp_path / "home")})
    assert path.endswith(os.path.join("snapshots", "old", "config.json"))
    # without refs/main: the newest snapshot holding a config.json
    os.remove(tmp_path / "home" / "hub" / "models--acme--M" / "refs" / "main")
    path, _ = find_config("acme/M", environ={"HF_HOME": str(tmp_path / "home")})
    assert path == str(newest)


def test_not_found_says_where(tmp_path):
    path, looked = find_config("acme/Missing", environ={"HF_HUB_CACHE": str(tmp_path)})
    assert path is None and looked[0] == str(tmp_path)


def _plan(env, *args):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_CACHE"))}
    e.update(env)
    return subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", *args], capture_output=True, text=True,
                          env=e)


def test_cli_reads_model_from_default_cache_layout(tmp_path):
    # HOME's default layout (~/.cache/huggingface/hub), no HF_* variable set
    make_cache(tmp_path / ".cache" / "huggingface" / "hub", "acme/Wide-40")
    r = _plan({"HOME": str(tmp_path)}, "--json", "--", "vllm", "serve", "acme/Wide-40")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["model"]["num_attention_heads"] == 40 and d["layout"]["num_kv_heads"] == 5
    assert "local Hugging Face cache" in d["model_source"]
    assert d["defaults"]["values"]["max_model_len"]["value"] == 8192  # the model's own length


def test_cli_cache_beats_preset_and_falls_back_to_preset(tmp_path):
    cfg = dict(CFG, num_attention_heads=64, num_key_value_heads=8)
    make_cache(tmp_path / "hub", "Qwen/Qwen3-32B", cfg=cfg)
    d = json.loads(_plan({"HF_HUB_CACHE": str(tmp_path / "hub"), "HOME": str(tmp_path)}, "--json", "--model",
                         "Qwen/Qwen3-32B").stdout)
    assert "local Hugging Face cache" in d["model_source"] and d["model"]["architecture"] == "LlamaForCausalLM"
    d = json.loads(_plan({"HF_HUB_CACHE": str(tmp_path / "empty"), "HOME": str(tmp_path)}, "--json", "--model",
                         "Qwen/Qwen3-32B").stdout)
    assert "embedded preset" in d["model_source"] and d["model"]["architecture"] == "Qwen3ForCausalLM"


def test_cli_unknown_id_says_where_it_looked(tmp_path):
    r = _plan({"HF_HUB_CACHE": str(tmp_path / "hub"), "HOME": str(tmp_path)}, "--model", "acme/Nothing-1B")
    assert r.returncode == 2
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "unknown model" in line and str(tmp_path / "hub") in line
    assert "config.json" in line
