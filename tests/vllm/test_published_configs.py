"""Issue 26, "Why" item 6 and the last "Done when" bullet: published decoder configs the
built-in reader had not seen (tests/data/model_configs_published, each file's source in
manifest.json), each read by vLLM 0.33's own ModelConfig (``vllm_guard.model_reader``) and by
``flashinfer-guard plan --model <file> --model-reader builtin`` (the reader a machine without
vLLM uses), per (config, tp): the same per-rank groups (kind, heads, KV heads, head dims,
window, count), MLA where vLLM runs MLA, a refusal only where vLLM refuses.

Measured on this set: 30 of 96 (config, tp) pairs agreed before (main at d288519), 96 of 96
after. Issue 42 item 6 added five files the reader misread (Qwen2-VL-7B-Instruct's flat layout,
starcoder and gpt_bigcode-defaults: multi-query, gemma4-text-defaults and gemma-4-26B-A4B-resaved:
full layers at global_head_dim / per_layer_config): 116 of 116 pairs agree after (measured
2026-12-03). The expected answers are vLLM's; nothing expected comes from guard_core.

Also item 6's last sentence (the reader chain): a config the built-in reader cannot read is
read by vLLM's own config code when plan runs in vLLM's environment, instead of ending the run.
"""

import json
import os
from importlib import metadata as md

import pytest

from tests.common.published_configs import PUBLISHED, compare, names, vllm_answer, vllm_readings, plan_answer

TPS = (1, 2, 4, 8)


LINE = os.environ.get("FLASHINFER_GUARD_VLLM_LINE") or md.version("vllm")
# the built-in reader follows vLLM 0.33's rules and the defaults of its transformers (5.20.2):
# these tests are collected on the 0.33.0 line only (other lines read with older rules)
if LINE == "0.33.0":
    @pytest.fixture(scope="module")
    def readings(tmp_path_factory):
        return vllm_readings(PUBLISHED, str(tmp_path_factory.mktemp("published")), TPS)


    def test_every_file_has_its_source():
        with open(os.path.join(PUBLISHED, "manifest.json")) as fh:
            manifest = json.load(fh)
        assert set(manifest) == set(names())
        for n, m in manifest.items():
            assert m["kind"] in ("published", "resaved", "defaults") and m["source"], n


    def test_published_configs_read_as_vllm_reads_them(readings, record_property):
        rows = compare(PUBLISHED, readings, TPS)
        ok = sum(r[4] for r in rows)
        record_property("agree", f"{ok}/{len(rows)}")
        print(f"published configs vs vLLM 0.33 ModelConfig: {ok} of {len(rows)} (config, tp) pairs agree")
        bad = [f"{n} tp{tp}: vLLM {theirs} | plan {mine}" for n, tp, theirs, mine, same in rows if not same]
        assert not bad, "\n".join(bad)
        # the set exercises each rule at least once (vLLM's answers, not ours)
        kinds = {vllm_answer(readings[n], 1)[0] for n in names()}
        assert {"groups", "mla"} <= kinds


    def test_transformers_reader_reads_as_vllm(readings, record_property):
        """The reader a machine with transformers but no server uses (``--model-reader
        transformers``: transformers' own config class for the model_type, never remote code, its
        ``to_dict()`` read by the built-in rules), held to vLLM's reading on the same files. It may
        refuse only where transformers has no class for the model_type (vLLM brings its own), in one
        line. Measured: 90 of 96 pairs agreed when first run; Zamba2's ``layer_types`` (transformers'
        alias of ``layers_block_type``) read its 9 shared attention blocks as "hybrid", not
        attention (0 groups where vLLM has 9 x 32/32/160); after: 94 of 96, the other two
        deepseek-vl2-tiny (model_type deepseek_vl_v2 is vLLM's own config class)."""
        rows = compare(PUBLISHED, readings, TPS, reader="transformers")
        ok = sum(r[4] for r in rows)
        record_property("agree", f"{ok}/{len(rows)}")
        print(f"published configs, transformers' classes vs vLLM 0.33 ModelConfig: {ok} of {len(rows)} agree")
        bad = [f"{n} tp{tp}: vLLM {theirs} | plan {mine}" for n, tp, theirs, mine, same in rows
               if not same and not (mine[0] == "refuses" and "no config class for model_type" in mine[1]
                                    and "\n" not in mine[1])]
        assert not bad, "\n".join(bad)
        assert ok >= len(rows) - 2 * len(TPS)  # at most two files with no transformers class (vLLM's own)
        z = [r for r in rows if r[0] == "zamba2-defaults"]
        assert z and all(r[4] for r in z), z


    # databricks/dbrx-instruct's config.json (its attention fields as published): n_heads and
    # attn_config.kv_n_heads, which the built-in reader does not read
    DBRX = {"architectures": ["DbrxForCausalLM"], "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
            "d_model": 6144, "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
            "max_seq_len": 32768, "model_type": "dbrx", "n_heads": 48, "n_layers": 40, "torch_dtype": "bfloat16",
            "vocab_size": 100352}


    def test_reader_chain_server_reads_what_the_builtin_cannot(tmp_path):
        path = tmp_path / "dbrx-instruct.json"
        path.write_text(json.dumps(DBRX))
        # vLLM 0.33 at TP 8: 48 / 8 query heads, attn_config.kv_n_heads 8 / 8
        # (DbrxModelArchConfigConvertor, transformers_utils/model_arch_config_convertor.py:522-528),
        # head size d_model / n_heads = 6144 / 48, 40 layers
        theirs = ("groups", [("full", 6, 1, 128, 128, 40, None)])
        # built-in only: one line naming what it could not read, exit 2
        mine = plan_answer(str(path), 8, "builtin")
        assert mine[0] == "refuses" and "n_head" in mine[1] and "\n" not in mine[1], mine
        # the default (auto) in vLLM's environment: vLLM's own reader reads it (main: the
        # built-in reader's refusal ended the run)
        assert plan_answer(str(path), 8, "auto") == theirs
        # doctor --model the same: not refused, vLLM's reading shown (main: exit 2)
        import io
        from contextlib import redirect_stderr, redirect_stdout

        from guard_core.commands import cli

        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            code = cli.main(["doctor", "--model", str(path), "--tp", "8"])
        assert code == 0 and "vLLM's own config code: 40 x full 6/1/128/128" in out.getvalue(), out.getvalue()

