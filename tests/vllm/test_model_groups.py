"""The corpus of published config.json files read by vLLM's own config code and by the
built-in reader, at TP 1 and 8: the same attention groups, or a one-line refusal where vLLM
refuses the config (e.g. it needs remote code, or this line's transformers does not know the
model type).

vLLM's reading is ``vllm_guard.model_reader`` (``vllm.config.ModelConfig`` built offline, its
per-rank numbers and, from 0.33, its per-layer ``model_arch_config[i]``), run once over the whole
corpus in a subprocess of this environment's interpreter. The expected groups are vLLM's; the
built-in reader (guard_core) is what is checked.
"""

import json
import os
import shutil
import sys

import pytest

from tests.common.server_reading import CORPUS, TPS, corpus, corpus_readings
from tests.common import forkserver  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(scope="module")
def vllm_readings(tmp_path_factory):
    return corpus_readings("vllm_guard.model_reader", str(tmp_path_factory.mktemp("corpus")))


def builtin(name: str, tp: int):
    from guard_core.deployment.groups import GroupsError
    from guard_core.deployment.presets import ModelError, load_model

    try:
        facts = load_model(os.path.join(CORPUS, name + ".json"))
        return facts.uses_mla, sorted(g.key for g in facts.model_groups().per_rank(tp) if g.kind != "mla")
    except (ModelError, GroupsError) as exc:
        return None, str(exc)


def compare(readings):
    from guard_core.deployment.server_reader import rank_groups_from

    agree, refused, differ = [], [], []
    for name in corpus():
        r = readings[name]
        if not r.get("ok"):
            refused.append((name, r["refusal"]))
            continue
        for tp in TPS:
            rows = r["groups"][str(tp)]
            mla, mine = builtin(name, tp)
            if isinstance(rows, dict):  # vLLM cannot split this model at this TP
                if mla is not None:
                    differ.append((name, tp, f"vLLM: {rows['refusal']}", mine))
                continue
            theirs = sorted(g.key for g in rank_groups_from(rows) if g.kind != "mla")
            if mla is None or theirs != mine or bool(mla) != bool(r["use_mla"]):
                differ.append((name, tp, theirs, mine))
        else:
            agree.append(name)
    return agree, refused, differ


def test_corpus_read_as_vllm_reads_it(vllm_readings, record_property):
    agree, refused, differ = compare(vllm_readings)
    record_property("models", len(corpus()))
    record_property("agree", len(agree))
    record_property("vllm_refuses", len(refused))
    summary = {"models": len(corpus()), "agree": len(agree), "vllm_refuses": [n for n, _ in refused],
               "differ": [d[0] for d in differ]}
    print("corpus vs vLLM:", json.dumps(summary))
    assert not differ, differ
    for name, why in refused:
        assert "\n" not in why and len(why) < 600, name
    assert len(agree) >= 40


@pytest.mark.parametrize("name", ["gemma-4-26B-A4B", "MiMo-V2-Flash", "chatglm3-6b", "llava-1.5-7b-hf",
                                  "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "Llama-4-Scout-17B-16E-Instruct",
                                  "gpt-oss-20b", "Qwen3.5-397B-A17B"])
def test_named_models_read_as_vllm_reads_them(vllm_readings, name):
    from guard_core.deployment.server_reader import rank_groups_from

    r = vllm_readings[name]
    if not r.get("ok"):
        # this line's transformers cannot parse it: vLLM refuses in one line (0.23's gemma4)
        assert "\n" not in r["refusal"]
        assert os.environ.get("FLASHINFER_GUARD_VLLM_LINE", "") != "0.33.0" or name not in (
            "gemma-4-26B-A4B", "MiMo-V2-Flash", "llava-1.5-7b-hf"), r["refusal"]
        return
    for tp in TPS:
        theirs = sorted(g.key for g in rank_groups_from(r["groups"][str(tp)]))
        assert theirs == builtin(name, tp)[1], (name, tp)


def test_plan_uses_vllms_reading_and_says_the_builtin_agrees(tmp_path):
    # gpt-oss-20b: two groups (sliding 128 and full, sinks), read by every vLLM line here
    d = tmp_path / "gpt-oss-20b"
    d.mkdir()
    shutil.copy(os.path.join(CORPUS, "gpt-oss-20b.json"), d / "config.json")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = forkserver.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--model", str(d),
                        "--framework-version", "0.23.0", "--gpu", "h100", "--tp", "8", "--resolution", "builtin"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr[-1000:]
    r = json.loads(p.stdout)
    assert r["model_reader"]["name"] == "vLLM's own config code" and r["model_reader"]["agrees"] is True
    assert len(r["groups"]) == 2


def test_groups_of_different_head_dims_share_one_buffer_big_enough_for_both():
    """Gemma-4-31B's sliding (32/16/256) and full (32/4/512) groups as two real builders:
    alone, the 512 group's buffer is the larger where the line's own size does not already
    cover it; shared (either builder first), the one buffer ends as large as the larger."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1")
    runs = {}
    for label, extra in (("guard", {}), ("baseline", {"FG_TEST_NO_PLUGINS": "1", "VLLM_PLUGINS": ""})):
        p = forkserver.run([sys.executable, os.path.join(HERE, "groups_scenarios.py")], capture_output=True,
                           text=True, timeout=900, env=dict(env, **extra), cwd=HERE)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT: ")]
        assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-2000:]
        runs[label] = json.loads(lines[-1][len("RESULT: "):])
    g, base = runs["guard"], runs["baseline"]
    from guard_core.versions import version_lt

    for k in ("sliding", "full"):
        assert g["alone"][k] >= base["alone"][k], k  # never below what vLLM allocates
    for order, s in g["shared"].items():
        assert s["same_storage"], order  # one buffer for both groups, grown in place
        assert s["after"] == s["second_holds"] >= s["first_alone"], (order, s)
    if version_lt(g["flashinfer"], "0.7.1"):
        # packed-row scratch: the 512 group outgrows vLLM's buffer, the 256 group does not; shared
        # in either order, the one buffer ends as large as the 512 group's own
        assert g["alone"]["full"] > base["alone"]["full"] and g["alone"]["sliding"] == base["alone"]["sliding"]
        for order, s in g["shared"].items():
            assert s["after"] == g["alone"]["full"], (order, s, g["alone"])
    else:
        # FlashInfer >= 0.7.1 (PR #5177) on vLLM's 1 GiB+ buffers: the guard stands down
        assert g["alone"] == base["alone"]
        for order, s in g["shared"].items():
            assert s["after"] == s["first_alone"], (order, s)


def test_nemotron_super_block_configs_as_vllms_own_code_reads_them():
    """Llama-3.3-Nemotron-Super-49B needs its remote config class (configuration_decilm.py), which
    an offline server cannot run: vLLM refuses the file in one line (above). Its own code for the
    layout is run here on the published block_configs, with attribute access standing in for that
    class: ``NemotronNasModelArchConfigConvertor.get_total_num_kv_heads`` (per-rank by vLLM's
    ``max(1, total // tp)``) and ``DeciLMDecoderLayer``'s no_op rule, against the built-in reader."""
    from types import SimpleNamespace

    import vllm.config  # noqa: F401  (the convertor module is imported through it; alone it is a cycle on 0.23)
    from vllm.transformers_utils import model_arch_config_convertor as conv

    with open(os.path.join(CORPUS, "Llama-3_3-Nemotron-Super-49B-v1.json")) as fh:
        raw = json.load(fh)
    blocks = [SimpleNamespace(attention=SimpleNamespace(**b["attention"]), ffn=SimpleNamespace(**b["ffn"]))
              for b in raw["block_configs"]]
    cfg = SimpleNamespace(**dict(raw, block_configs=blocks))
    total_kv = conv.MODEL_ARCH_CONFIG_CONVERTORS["nemotron-nas"](cfg, cfg).get_total_num_kv_heads()
    attention_layers = sum(not b.attention.no_op for b in blocks)  # vLLM's has_noops count (config/model.py)
    for tp in TPS:
        mine = builtin("Llama-3_3-Nemotron-Super-49B-v1", tp)[1]
        assert [(k, q, kv, d, count) for k, q, kv, d, _dv, count in mine] == [
            ("full", raw["num_attention_heads"] // tp, max(1, total_kv // tp), raw["hidden_size"] // raw["num_attention_heads"],
             attention_layers)]
