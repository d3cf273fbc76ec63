"""Hostile config.json: every field used is validated, the file is read with bounds.

Promise (guard_core/deployment/presets.py): a config either gives ModelFacts whose numbers
are positive integers within bounds, or one ModelError line naming the file, the
field and the value; reading accepts only a regular file of at most 4 MiB, and
nesting cannot blow the stack.
"""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from guard_core.commands import cli
from guard_core.deployment.presets import (MAX_CONFIG_BYTES, ModelError, ModelFacts, facts_from_config, find_preset,
                                load_model)

FAST = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
BASE = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "hidden_size": 4096, "num_hidden_layers": 32}


def _one_line_error(exc: ModelError, *needles):
    msg = str(exc)
    assert "\n" not in msg and "\r" not in msg and msg.isprintable(), msg
    assert len(msg) < 600
    for n in needles:
        assert n in msg, (n, msg)


def _write(tmp_path, text, name="config.json"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_head_dim_zero_is_derived_as_vllm_derives_it():
    """head_dim 0 is not refused: vLLM 0.33 reads a head_dim of 0 as unset and takes
    hidden_size // heads (transformers_utils/model_arch_config_convertor.py get_head_size:
    "Some config classes ... materialize a missing head_dim as 0"); 4096 // 32 = 128."""
    f = facts_from_config(dict(BASE, head_dim=0))
    assert f.head_dim == 128


@pytest.mark.parametrize("patch,field,value_shown", [
    ({"head_dim": None, "hidden_size": "4096"}, "hidden_size", '"4096"'),
    ({"head_dim": [128]}, "head_dim", "[128]"),
    ({"head_dim": float("inf")}, "head_dim", "Infinity"),
    ({"head_dim": float("nan")}, "head_dim", "NaN"),
    ({"head_dim": -float("inf")}, "head_dim", "-Infinity"),
    ({"num_hidden_layers": "4", "full_attention_interval": 4}, "num_hidden_layers", '"4"'),
    ({"full_attention_interval": 0}, "full_attention_interval", "0"),
    ({"full_attention_interval": "4"}, "full_attention_interval", '"4"'),
    ({"kv_lora_rank": 512, "qk_nope_head_dim": "128"}, "qk_nope_head_dim", '"128"'),
    ({"kv_lora_rank": 512, "qk_rope_head_dim": 64.0}, "qk_rope_head_dim", "64.0"),
    ({"kv_lora_rank": 512, "v_head_dim": True}, "v_head_dim", "true"),
    ({"kv_lora_rank": "512"}, "kv_lora_rank", '"512"'),
    ({"head_dim": 1.5}, "head_dim", "1.5"),
    ({"head_dim": 128.0}, "head_dim", "128.0"),
    ({"num_attention_heads": True}, "num_attention_heads", "true"),
    ({"num_key_value_heads": False}, "num_key_value_heads", "false"),
    ({"num_attention_heads": 10**12}, "num_attention_heads", "1000000000000"),
    ({"num_attention_heads": -32}, "num_attention_heads", "-32"),
    ({"num_key_value_heads": 0}, "num_key_value_heads", "0"),
    ({"head_dim": -1}, "head_dim", "-1"),
    ({"head_dim": {"a": 1}}, "head_dim", '{"a": 1}'),
    ({"num_hidden_layers": 10**9}, "num_hidden_layers", "1000000000"),
    ({"architectures": 5}, "architectures", "5"),
    ({"architectures": {"a": 1}}, "architectures", '{"a": 1}'),
    ({"architectures": "LlamaForCausalLM"}, "architectures", '"LlamaForCausalLM"'),
    ({"architectures": [None]}, "architectures", "[null]"),
    ({"layer_types": "full_attention"}, "layer_types", '"full_attention"'),
    ({"layer_types": [1, 2]}, "layer_types", "[1, 2]"),
    ({"text_config": [1]}, "text_config", "[1]"),
    ({"llm_config": "x"}, "llm_config", '"x"'),
    ({"head_dim": None, "hidden_size": 16}, "hidden_size", "16"),
])
def test_wrong_types_and_values_one_line_naming_file_field_value(patch, field, value_shown):
    cfg = dict(BASE, **patch)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ModelError) as ei:
        facts_from_config(cfg, "/models/x/config.json")
    _one_line_error(ei.value, "/models/x/config.json", field, value_shown)


def test_text_config_values_are_validated_too():
    cfg = {"architectures": ["Qwen3VLForConditionalGeneration"],
           "text_config": {"num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": "128"}}
    with pytest.raises(ModelError) as ei:
        facts_from_config(cfg, "c.json")
    _one_line_error(ei.value, "c.json", "head_dim", '"128"')


def test_valid_configs_still_read():
    f = facts_from_config(dict(BASE))
    assert (f.num_attention_heads, f.num_key_value_heads, f.head_dim, f.attention_layers) == (32, 8, 128, 32)
    f = facts_from_config(dict(BASE, head_dim=None))  # null means: derive from hidden_size
    assert f.head_dim == 128
    f = facts_from_config(dict(BASE, full_attention_interval=4))
    assert f.kind == "hybrid" and f.attention_layers == 8
    f = facts_from_config(dict(BASE, kv_lora_rank=None))
    assert not f.uses_mla
    f = facts_from_config(dict(BASE, architectures=[]))
    assert f.architecture == "?"


def test_json_reader_refuses_huge_integers_and_constants_in_used_fields(tmp_path):
    p = _write(tmp_path, '{"num_attention_heads": ' + "9" * 5000 + ', "head_dim": 128}')
    with pytest.raises(ModelError) as ei:
        load_model(p)
    _one_line_error(ei.value, p, "num_attention_heads", "5000-digit")
    p = _write(tmp_path, '{"num_attention_heads": 32, "head_dim": Infinity}')
    with pytest.raises(ModelError) as ei:
        load_model(p)
    _one_line_error(ei.value, "head_dim", "Infinity")
    # a huge number or a constant in a field we do not use is no business of ours
    p = _write(tmp_path, json.dumps(dict(BASE))[:-1] + ', "rope_theta": ' + "9" * 5000 + ', "x": NaN}')
    assert load_model(p).head_dim == 128


@pytest.mark.parametrize("text,needle", [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ('{"a":' * 50000 + "1" + "}" * 50000, "nested too deeply"),
    ("", "not JSON"),
    ("{", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ("null", "not a JSON object"),
    ('"\\ud800"', "not a JSON object"),
])
def test_malformed_files(tmp_path, text, needle):
    p = _write(tmp_path, text)
    with pytest.raises(ModelError) as ei:
        load_model(p)
    _one_line_error(ei.value, needle)


def test_not_utf8_and_bom(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b'{"num_attention_heads": 32, "head_dim": 128, "x": "\xff"}')
    with pytest.raises(ModelError) as ei:
        load_model(str(p))
    _one_line_error(ei.value, "not UTF-8")
    # a BOM: refused as transformers' json.loads refuses it (issue 29; test_issue29_model_fields.py)
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(BASE).encode())
    with pytest.raises(ModelError) as ei:
        load_model(str(p))
    _one_line_error(ei.value, "BOM")


def test_size_limit(tmp_path):
    p = tmp_path / "config.json"
    body = json.dumps(BASE)
    p.write_text(body[:-1] + ', "pad": "' + "x" * MAX_CONFIG_BYTES + '"}')
    with pytest.raises(ModelError) as ei:
        load_model(str(p))
    _one_line_error(ei.value, "4 MiB")
    p.write_text(body[:-1] + ', "pad": "' + "x" * (MAX_CONFIG_BYTES - len(body) - 20) + '"}')
    assert os.path.getsize(p) <= MAX_CONFIG_BYTES
    assert load_model(str(p)).head_dim == 128


def test_fifo_and_devices_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ModelError) as ei:
        load_model(str(fifo))  # would block forever if opened for a blocking read
    _one_line_error(ei.value, "not a regular file")
    d = tmp_path / "m"
    d.mkdir()
    os.mkfifo(d / "config.json")
    with pytest.raises(ModelError):
        load_model(str(d))
    if os.path.exists("/dev/zero"):
        with pytest.raises(ModelError) as ei:
            load_model("/dev/zero")
        _one_line_error(ei.value, "not a regular file")


def test_paths_are_escaped_in_errors(tmp_path):
    for spec in ("a\nb.json", "\x1b[31mred.json", "x\x00y.json", "/no/such/" + "d" * 5000 + ".json"):
        with pytest.raises(ModelError) as ei:
            load_model(spec)
        _one_line_error(ei.value)


def test_preset_lookup_does_not_recurse():
    assert find_preset("Qwen3-32B" + "-fp8" * 100) is not None
    assert find_preset("x" + "-fp8" * 100000) is None  # used to exhaust the stack
    assert find_preset("") is None
    with pytest.raises(ModelError):
        load_model("")
    with pytest.raises(ModelError) as ei:
        load_model("no-such\nmodel")
    _one_line_error(ei.value, "unknown model")


def test_cli_json_is_strict_for_every_config(tmp_path, capsys):
    p = _write(tmp_path, json.dumps(dict(BASE, num_hidden_layers=61, layer_types=["full_attention"] * 61)))
    assert cli.main(["plan", "--json", "--model", p]) == 0
    out = capsys.readouterr().out
    json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


# ---- property-based ----

_FIELDS = ["num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "num_hidden_layers",
           "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "full_attention_interval",
           "layer_types", "architectures", "text_config", "llm_config"]
_scalar = st.one_of(
    st.integers(min_value=-5, max_value=300), st.integers(), st.booleans(), st.none(),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([128.0, 1.5, 0.0, -0.0]),
    st.text(max_size=10), st.sampled_from(["128", "full_attention", "linear_attention", ""]),
)
_value = st.recursive(_scalar, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.sampled_from(_FIELDS), kids, max_size=4)),
                      max_leaves=12)
_config = st.dictionaries(st.sampled_from(_FIELDS), _value, max_size=10)


def _check_facts(f: ModelFacts):
    for v in (f.num_attention_heads, f.num_key_value_heads, f.head_dim):
        assert type(v) is int and 1 <= v <= 4096
    assert f.v_head_dim is None or (type(f.v_head_dim) is int and f.v_head_dim >= 1)
    assert type(f.num_layers) is int and type(f.attention_layers) is int and 0 <= f.attention_layers
    assert isinstance(f.architecture, str)
    json.dumps(f.as_dict(), allow_nan=False)


@FAST
@given(st.one_of(_config, st.builds(lambda c: dict(BASE, **c), _config)))
def test_property_config_gives_valid_facts_or_one_error_line(cfg):
    try:
        f = facts_from_config(cfg, "/m/config.json")
    except ModelError as exc:
        _one_line_error(exc, "/m/config.json")
        return
    _check_facts(f)


@FAST
@given(st.binary(max_size=300) | _config.map(lambda c: json.dumps(c).encode()) |
       st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n) |
       st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_property_any_file_gives_facts_or_one_error_line(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("cfg") / "config.json"
    p.write_bytes(data)
    try:
        f = load_model(str(p))
    except ModelError as exc:
        _one_line_error(exc)
        return
    _check_facts(f)
