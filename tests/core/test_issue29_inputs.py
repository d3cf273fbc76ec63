"""Plan inputs read as the servers read them (issue 29, item 6, the parts done here).

- ``8.19k``: vLLM's ``human_readable_int`` computes ``int(float(number) * 1000)``
  (vllm/utils/argparse_utils.py 0.23.0:40-58), so ``8.19k`` is 8189 (float 8189.999...);
  the built-in reader said 8190. The installed parser is compared in
  tests/vllm/test_launch_parser.py::test_decimal_suffixes_read_as_vllm_reads_them.
- ``--kv-pool-tokens 1`` at 131,072 context said "need 0 B, OK"; SGLang refuses such a pool
  at start-up ("Memory pool size is too small": ``max_req_len = min(context_len - 1,
  pool - 1)`` and, before 0.5.23, ``max_req_len - 5`` must be > 0; managers/tp_worker.py
  0.5.5:295-302, 0.5.11:302-309, 0.5.23:421-425), so the plan refuses it too.
"""

import pytest

from guard_core.commands import cli
from guard_core.deployment.launch_command import parse_launch


@pytest.mark.parametrize("value, expected", [("8.19k", 8189), ("4.35k", 4350), ("0.57k", 570), ("25.6k", 25600)])
def test_decimal_suffix_as_vllm_computes_it(value, expected):
    # expected: int(float(value[:-1]) * 1000), vLLM's own formula, written out
    assert expected == int(float(value[:-1]) * 1000)
    launch = parse_launch(["vllm", "serve", "M", "--max-model-len", value], reader="builtin", line="0.23.0")
    assert launch.max_model_len == expected


def _plan(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err.strip()


@pytest.mark.parametrize("line, pool, refused", [("0.5.5", 1, True), ("0.5.5", 6, True), ("0.5.5", 7, False),
                                                 ("0.5.11", 6, True), ("0.5.23", 1, True), ("0.5.23", 2, False)])
def test_a_kv_pool_sglang_refuses_is_refused(line, pool, refused, capsys):
    rc, out, err = _plan(["plan", "--framework", "sglang", "--framework-version", line, "--deterministic",
                          "--kv-pool-tokens", str(pool), "--max-model-len", "131072"], capsys)
    if refused:
        assert rc == 2 and len(err.splitlines()) == 1 and "Memory pool size is too small" in err, err
        assert "need" not in out
    else:
        assert rc == 0 and "verdict" in out, err


def test_the_launch_commands_max_total_tokens_is_bounded_alike(capsys):
    rc, _, err = _plan(["plan", "--gpu", "h200", "--", "python", "-m", "sglang.launch_server", "--model-path",
                        "Qwen3-VL-32B-Instruct", "--enable-deterministic-inference", "--context-length", "131072",
                        "--max-total-tokens", "3"], capsys)
    assert rc == 2 and "a KV pool of 3 tokens" in err, err


@pytest.mark.parametrize("image, line, why", [
    ("vllm/vllm-openai:v0.33.0rc1", "0.19.1", "a pre-release"),   # before: 0.19.1, silently
    ("vllm/vllm-openai:v0.9.2", "0.19.1", "vLLM 0.9.2, a line not read here"),  # before: "vLLM 0.9.2 pins" 0.6.6
    ("vllm/vllm-openai:latest", "0.19.1", "no release"),
    ("vllm/vllm-openai:v0.23.0", "0.23.0", None),                  # a released line read here: simulated
])
def test_image_tags_map_to_released_lines_only(image, line, why, capsys):
    """Issue 29, item 6: an image tag sets the simulated line only where it names a release of a
    line read here (guard_core.flashinfer.releases.CHECKED_LINES, each read from its wheel); otherwise the
    report says which line it simulates and why."""
    import json

    rc, out, err = _plan(["plan", "--gpu", "h200", "--json", "--", "docker", "run", "--gpus", "all", image,
                          "--model", "Qwen3-VL-32B-Instruct"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["framework_version"].split(".")[:2] == line.split(".")[:2], d["framework_version"]
    said = [n for n in d["notes"] if "image tag" in n]
    if why is None:
        assert said == [f"simulating vLLM {line}: the image tag of the launch command"], said
    else:
        assert len(said) == 1 and why in said[0] and f"simulating vLLM {line}" in said[0], said
