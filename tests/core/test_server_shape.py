"""One table for the fields a launch command and a simulated deployment share (issue 30).

``Launch`` (what a launch command says) and ``Deployment`` (what ``plan`` simulates) are each a
``ServerShape`` (``guard_core/deployment/deployment_record.py``): a field added to the shape is in
both records by construction, so "added to one record but not the other" cannot happen for it.
What can still go wrong, and what this file holds:

- a field added to both records by hand, beside the shape (the two lists would grow apart again);
- ``plan`` copying the command's fields one by one (a field left out of the copy is silently lost):
  it hands the command's shape on whole, each of its own flags (``PLAN_FLAGS``) over it.
"""

import ast
import dataclasses
from pathlib import Path

import pytest

from guard_core.commands import plan_report
from guard_core.commands.options import build_parser, check_args, resolve_gpu
from guard_core.deployment.launch_command import Launch
from guard_core.deployment.server_defaults import Deployment, ServerShape

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {f.name for f in dataclasses.fields(ServerShape)}


def shared_beside_the_shape(a, b) -> set:
    """The fields two records both declare that are not ``ServerShape``'s."""
    return ({f.name for f in dataclasses.fields(a)} & {f.name for f in dataclasses.fields(b)}) - SHAPE


def test_launch_and_deployment_share_only_the_shape():
    """Both records are a ServerShape, and the only other field they both have is the framework
    (each record's own: Launch's is the command's, positional; Deployment's has a default)."""
    assert issubclass(Launch, ServerShape) and issubclass(Deployment, ServerShape)
    assert {"tp", "max_num_seqs", "draft_tokens", "capture_sizes", "page_size"} <= SHAPE
    assert shared_beside_the_shape(Launch, Deployment) == {"framework"}


def test_a_field_added_to_both_by_hand_is_seen():
    """The check above can fail: a field planted in both records beside the shape is reported."""
    planted_l = dataclasses.make_dataclass("L", [("new_limit", int, dataclasses.field(default=0))], bases=(Launch,))
    planted_d = dataclasses.make_dataclass("D", [("new_limit", int, dataclasses.field(default=0))],
                                           bases=(Deployment,))
    assert shared_beside_the_shape(planted_l, planted_d) == {"framework", "new_limit"}


# Two commands that, together, set every field of the shape (to values other than the default).
# A field added to the shape needs an option here that sets it (test_every_field_is_exercised).
VLLM = ("--framework-version 0.33.0 --gpu h200 -- vllm serve tests/data/model_configs/Llama-3.3-70B-Instruct.json "
        "--tensor-parallel-size 4 --pipeline-parallel-size 2 --data-parallel-size 2 --decode-context-parallel-size 2 "
        "--enable-expert-parallel --all2all-backend deepep_low_latency --max-num-seqs 128 "
        "--max-num-batched-tokens 4096 --max-model-len 8192 --block-size 32 --no-enable-chunked-prefill "
        "--speculative-config {\"method\":\"ngram\",\"num_speculative_tokens\":3} "
        "--compilation-config {\"cudagraph_capture_sizes\":[1,2,4,16],\"max_cudagraph_capture_size\":16}")
SGLANG = ("--framework-version 0.5.11 --gpu b200 -- python -m sglang.launch_server "
          "--model-path tests/data/model_configs/Qwen2.5-7B.json --tp-size 4 --dp-size 2 --enable-dp-attention "
          "--max-running-requests 32 --chunked-prefill-size 2048 --context-length 4096 --page-size 16 "
          "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
          "--speculative-num-draft-tokens 4 --cuda-graph-max-bs 32 --disable-cuda-graph-padding --disable-cuda-graph")


def _server(text: str, *flags: str):
    """(the command's Launch, the plan's notes, the Deployment the plan simulates), through the
    plan's public stages (``plan_report.read_command`` -> ``resolve_server``)."""
    head, _, launch = text.partition(" -- ")
    a = build_parser().parse_args(["plan", *head.split(), *flags])
    check_args(a)
    a.launch = launch.split()
    cmd = plan_report.read_command(a, {})
    server = plan_report.resolve_server(a, cmd, resolve_gpu, {})
    return cmd.launch, cmd.notes, server.deployment


@pytest.mark.parametrize("text", [VLLM, SGLANG], ids=["vllm", "sglang"])
def test_plan_hands_the_commands_shape_on_whole(text):
    launch, _notes, d = _server(text)
    assert d.shape() == launch.shape()
    assert (d.tp, d.max_num_seqs, d.page_size) == ((4, 128, 32) if launch.framework == "vllm" else (4, 32, 16))


def test_every_field_is_exercised():
    """Between them the two commands set every field of the shape, so the test above covers each."""
    defaults = ServerShape().shape()
    set_somewhere = {k for text in (VLLM, SGLANG) for k, v in _server(text)[0].shape().items() if v != defaults[k]}
    assert set_somewhere == SHAPE, f"no command above sets {sorted(SHAPE - set_somewhere)}: add an option that does"


def test_each_plan_flag_replaces_the_commands_value_and_says_so():
    # plan's flags, each to a value the command above does not have
    flags = {"--tp": "2", "--dcp": "1", "--max-num-seqs": "99", "--max-batched-tokens": "3000",
             "--max-model-len": "5000", "--draft-tokens": "2", "--capture-sizes": "1,2,8", "--max-capture-batch": "8",
             "--page-size": "64"}
    want = {"tp": 2, "dcp": 1, "max_num_seqs": 99, "max_batched_tokens": 3000, "max_model_len": 5000,
            "draft_tokens": 2, "capture_sizes": (1, 2, 8), "max_capture": 8, "page_size": 64}
    launch, notes, d = _server(VLLM, *(x for kv in flags.items() for x in kv))
    got = dict(d.shape(), capture_sizes=tuple(d.capture_sizes))
    assert {k: got[k] for k in want} == want
    assert "--tp 2 replaces the command's tensor parallel size 4" in notes
    assert "--max-num-seqs 99 replaces the command's max seqs 128" in notes
    assert "--capture-sizes (1, 2, 8) replaces the command's capture sizes (1, 2, 4, 16)" in notes
    # every other field is the command's
    assert {k: v for k, v in got.items() if k not in want} == {k: v for k, v in launch.shape().items()
                                                              if k not in want}


def test_plan_flags_name_shape_fields_and_real_options():
    """Each row of PLAN_FLAGS is a field of the shape and an option of ``plan`` whose dest is the
    option's name (what ``resolve_server`` reads from the parsed options)."""
    plan = next(a for a in build_parser()._actions if getattr(a, "choices", None) and "plan" in a.choices)
    dests = {opt: act.dest for act in plan.choices["plan"]._actions for opt in act.option_strings}
    assert len(plan_report.PLAN_FLAGS) == 9
    for name, flag, _words in plan_report.PLAN_FLAGS:
        assert name in SHAPE, name
        assert dests.get(flag) == flag[2:].replace("-", "_"), flag


PRODUCT = ("guard_core", "vllm_guard", "sglang_guard")


def hand_copies(source: str) -> list[str]:
    """Calls of ``Deployment(...)`` or ``Launch(...)`` that name a shape field: the shape travels whole."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in ("Deployment", "Launch"):
                out += [f"line {node.lineno}: {name}({k.arg}=...)" for k in node.keywords if k.arg in SHAPE]
    return out


def test_no_product_code_copies_the_shape_field_by_field():
    found = []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)} {c}" for c in hand_copies(path.read_text())]
    assert not found, "\n".join(found)
    # the check can fail: the copy it replaced is seen
    assert hand_copies("d = Deployment(framework=fw, tp=L.tp if L else None, pp=L.pp)") == [
        "line 1: Deployment(tp=...)", "line 1: Deployment(pp=...)"]
