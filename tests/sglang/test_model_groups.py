"""The corpus of published config.json files read by SGLang's own config code and by the
built-in reader, at TP 1 and 8: the same planned shapes per attention layer, or a one-line
refusal where SGLang refuses the config (remote code, a model type its transformers does not
know, a quantization method its CPU build lacks).

SGLang's reading is ``sglang_guard.model_reader`` (``ModelConfig`` built offline; the shape its
FlashInfer backend plans with: ``get_max_num_attention_heads() // tp``, ``get_num_kv_heads(tp)``,
``head_dim``/``v_head_dim``; the layers that run attention), run once over the whole corpus in
a subprocess of this environment's interpreter. SGLang plans every attention layer with one
shape, so both readings are compared through ``guard_core.deployment.groups.server_view(.., "sglang")``.
One test (this suite runs under xdist: one reader run, not one per worker).
"""

import json
import os
from importlib import metadata

from tests.common.server_reading import CORPUS, TPS, corpus, corpus_readings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SGLANG = metadata.version("sglang")


def _key(v):
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())
# the layouts the issue names, where this SGLang line reads them (gpt-oss: its CPU build has no
# mxfp4 quantization method, Nemotron-Super needs remote code: one-line refusals)
NAMED = ("gemma-4-26B-A4B", "MiMo-V2-Flash", "chatglm3-6b", "llava-1.5-7b-hf", "Qwen3.5-397B-A17B",
         "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "Llama-4-Scout-17B-16E-Instruct")


def readings(root) -> dict:
    return corpus_readings("sglang_guard.model_reader", root)


def keys(groups):
    from guard_core.deployment.groups import server_view

    return sorted(g.key for g in server_view([g for g in groups if g.kind != "mla"], "sglang"))


def test_corpus_read_as_sglang_reads_it(tmp_path, record_property):
    from guard_core.deployment.groups import GroupsError
    from guard_core.deployment.server_reader import rank_groups_from
    from guard_core.deployment.presets import ModelError, load_model

    res = readings(str(tmp_path))
    agree, refused, differ = [], [], []
    for name in corpus():
        r = res[name]
        if not r.get("ok"):
            assert "\n" not in r["refusal"] and len(r["refusal"]) < 600, name
            refused.append(name)
            continue
        for tp in TPS:
            rows = r["groups"][str(tp)]
            try:
                facts = load_model(os.path.join(CORPUS, name + ".json"))
                mine, mla = keys(facts.model_groups().per_rank(tp)), facts.uses_mla
            except (ModelError, GroupsError) as exc:
                mine, mla = str(exc), None
            if isinstance(rows, dict):  # SGLang cannot split the heads at this TP: neither may we
                if mla is not None and not mla:
                    differ.append((name, tp, rows["refusal"], mine))
                continue
            theirs = keys(rank_groups_from(rows))
            if mla is None or theirs != mine or bool(mla) != bool(r["use_mla"]):
                differ.append((name, tp, theirs, mine))
        else:
            agree.append(name)
    record_property("models", len(corpus()))
    record_property("agree", len(agree))
    record_property("sglang_refuses", len(refused))
    print("corpus vs SGLang:", json.dumps({"models": len(corpus()), "agree": len(agree), "sglang_refuses": refused}))
    assert not differ, differ
    assert len(agree) >= 40
    if _key(SGLANG) >= (0, 5, 23):  # older lines' transformers do not know Gemma 4 (a one-line refusal above)
        assert set(NAMED) <= set(agree), sorted(set(NAMED) - set(agree))
