"""Issue 29, item 5: model fields validated as the servers validate them, `exact` only on the
vLLM/FlashInfer pairs the checked lines pin. Expected values come from the servers' and
transformers' own code (cited), never from guard_core."""

from __future__ import annotations

import json
import os

import pytest

from guard_core.commands import cli
from guard_core.decide.records import exact_refusal

HERE = os.path.dirname(os.path.abspath(__file__))
MIMO = os.path.join(os.path.dirname(HERE), "data", "model_configs", "MiMo-V2-Flash.json")


def _plan(path, capsys) -> tuple[int, str, str]:
    rc = cli.main(["plan", "--gpu", "h200", "--model", str(path)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip()


@pytest.mark.parametrize("field,value", [
    ("swa_head_dim", 10 ** 9), ("swa_v_head_dim", 10 ** 6), ("swa_num_key_value_heads", 2.5),
    ("swa_num_attention_heads", 63.5), ("swa_num_key_value_heads", "8"), ("sliding_window_size", -1),
    ("swa_num_key_value_heads", 7),  # 64 SWA query heads are no multiple of 7 KV heads
])
def test_out_of_range_or_fractional_swa_fields_refused(field, value, tmp_path, capsys):
    """MiMo-V2-Flash's SWA layers read their own heads and dims (vllm models/mimo_v2_flash.py);
    before: int() truncated 2.5 KV heads to 2 and a 10**9 head dim was sized ("need ... MiB")."""
    cfg = json.load(open(MIMO))
    cfg[field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, out, err = _plan(path, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and not out, (rc, out[-300:], err)
    assert "SWA" in err or field in err, err


def test_the_published_mimo_config_is_still_read(capsys):
    rc, out, err = _plan(MIMO, capsys)
    assert rc == 0 and "sliding" in out, err


def test_a_config_with_a_utf8_bom_is_refused_as_transformers_refuses_it(tmp_path, capsys):
    """transformers reads config.json with open(encoding="utf-8") + json.loads
    (configuration_utils.py _dict_from_json_file: 4.57.6:864-867, 5.20.2:1115-1118), and
    json.loads refuses a leading BOM; before: the built-in reader skipped it and sized the model."""
    cfg = json.load(open(MIMO))
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(cfg).encode())
    with pytest.raises(json.JSONDecodeError, match="BOM"):  # what transformers' reader does with it
        json.loads(path.read_text(encoding="utf-8"))
    rc, out, err = _plan(path, capsys)
    assert rc == 2 and "BOM" in err and len(err.splitlines()) == 1, (rc, err)


@pytest.mark.parametrize("vllm,flashinfer,ok", [
    # Requires-Dist flashinfer-python== of each checked wheel (envs' vllm-*.dist-info/METADATA)
    ("0.23.0", "0.6.12", True), ("0.32.0", "0.7.0.post1", True), ("0.33.0", "0.7.2.post1", True),
    ("0.33.0", "0.6.12", False), ("0.23.0", "0.7.2.post1", False), ("0.33.0", "0.7.4", False),
    ("0.32.0", "0.6.14", False),
])
def test_exact_only_on_the_pairs_the_checked_vllm_lines_pin(vllm, flashinfer, ok):
    """Before: any checked FlashInfer under any checked vLLM line passed (vLLM 0.33 + 0.6.12)."""
    why = exact_refusal("vLLM", vllm, flashinfer)
    assert (why is None) == ok, why
    if not ok:
        assert "not a checked pair" in why or "outside" in why or "not one of" in why
