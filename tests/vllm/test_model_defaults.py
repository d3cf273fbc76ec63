"""guard_core/deployment/model_defaults.json (transformers' declared config defaults per model_type, which
the built-in reader fills into a config that leaves fields out) equals what
ci/dump_model_defaults.py reads from the installed transformers now, and the defaults it
carries are the ones transformers' classes apply (the expected values are transformers')."""

import importlib.util
import json
import os
from importlib import metadata as md


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dump():
    spec = importlib.util.spec_from_file_location("dump_model_defaults",
                                                  os.path.join(REPO, "ci", "dump_model_defaults.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LINE = os.environ.get("FLASHINFER_GUARD_VLLM_LINE") or md.version("vllm")
# the built-in reader follows vLLM 0.33's rules and the defaults of its transformers (5.20.2):
# these tests are collected on the 0.33.0 line only (other lines read with older rules)
if LINE == "0.33.0":
    def test_committed_table_is_the_installed_transformers():
        live = json.loads(json.dumps(_dump().table()))
        with open(os.path.join(REPO, "guard_core", "deployment", "model_defaults.json")) as fh:
            committed = json.load(fh)
        assert committed["transformers"] == live["transformers"], "re-run ci/dump_model_defaults.py in the vLLM env"
        assert committed["models"] == live["models"]


    def test_table_defaults_are_what_transformers_applies():
        """A config naming only its model type, filled from the table, has the values transformers'
        class gives it, for every model type whose class builds with no arguments."""
        from transformers import CONFIG_MAPPING

        from guard_core.deployment.config_reader import fill_defaults

        checked = 0
        for mt in ("llama", "mistral", "qwen3", "gemma2", "gemma3_text", "falcon", "gpt2", "jamba", "laguna", "zamba2",
                   "deepseek_v2", "nemotron_h", "phi3", "olmo2", "starcoder2"):
            obj = CONFIG_MAPPING[mt]()
            filled = fill_defaults({"model_type": mt})
            for k, v in filled.items():
                if k not in ("num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "n_head",
                             "n_embd", "num_hidden_layers", "n_layer", "attn_layer_period", "attn_layer_offset"):
                    continue
                assert getattr(obj, k) == v, (mt, k, getattr(obj, k), v)
                checked += 1
        assert checked > 40

