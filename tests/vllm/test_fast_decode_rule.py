"""guard_core.flashinfer.releases.FOLLOWS_FLASHINFER_DECODE, read from the installed wheels of this line.

Whether vLLM's tensor-core decode follows FlashInfer's own decode arguments
(``uniform_q_len``) depends on whether its ``fast_plan_decode`` calls FlashInfer
(the wrapper's ``plan`` and ``flashinfer.decode.fast_decode_plan``) or carries its
own copy of the planner call (``self._cached_module.plan(...)``). This test reads
the source of the installed vLLM and FlashInfer (no import of either: ast only)
and checks the rule and its answer for this line's FlashInfer.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
from pathlib import Path

from guard_core.flashinfer import releases


def _source(package: str, *parts: str) -> ast.Module:
    root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
    path = root.joinpath(*parts)
    return ast.parse(path.read_text(), str(path))


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{name}: {len(found)} module-level definitions"
    return found[0]


def _calls(fn: ast.FunctionDef) -> set[str]:
    """Every call in ``fn`` as written: ``fast_decode_plan``, ``self.plan``, ``self._cached_module.plan``."""
    return {ast.unparse(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}


def _imports_from_flashinfer(tree: ast.Module, name: str) -> bool:
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("flashinfer")
               and any(a.name == name and a.asname in (None, name) for a in n.names) for n in tree.body)


def vllm_follows_flashinfer_decode() -> bool:
    """True where vLLM's fast_plan_decode plans only through FlashInfer's code."""
    tree = _source("vllm", "v1", "attention", "backends", "flashinfer.py")
    calls = _calls(_function(tree, "fast_plan_decode"))
    own_copy = any(c.endswith("_cached_module.plan") for c in calls)
    assert "self.plan" in calls or "fast_decode_plan" in calls or own_copy, calls  # it plans somehow
    return (not own_copy and "fast_decode_plan" in calls and "self.plan" in calls
            and _imports_from_flashinfer(tree, "fast_decode_plan"))


def flashinfer_one_token_uniform_q_len() -> bool:
    """Whether the installed FlashInfer's fast_decode_plan passes uniform_q_len=1 for
    one-token decode (the comment ``# uniform_q_len`` marks the argument where it has one)."""
    root = Path(importlib.util.find_spec("flashinfer").submodule_search_locations[0])
    lines = (root / "decode.py").read_text().splitlines()
    fn = _function(ast.parse("\n".join(lines)), "fast_decode_plan")
    body = lines[fn.lineno - 1:fn.end_lineno]
    marked = [i for i, ln in enumerate(body) if "# uniform_q_len" in ln]
    if not marked:
        return False  # this release has no uniform_q_len argument
    text = " ".join(" ".join(body[max(0, i - 3):i + 1]) for i in marked)
    # up to 0.7.2.post1: ``q_len_per_req if q_len_per_req > 1 else 0``
    if "q_len_per_req if q_len_per_req > 1 else 0" in " ".join(text.split()):
        return False
    # 0.7.4 (decode.py 0.7.4:5835-5836): ``args.append(q_len_per_req)  # uniform_q_len`` (1 for
    # one-token decode, the parameter's default) then ``args.append(True)  # fixed_uniform_q_len``;
    # another form needs reading
    for i in marked:
        here = body[i].split("#")[0].strip()
        after = body[i + 1] if i + 1 < len(body) else ""
        assert here == "args.append(q_len_per_req)" and "# fixed_uniform_q_len" in after \
            and after.split("#")[0].strip() == "args.append(True)", (body[i], after)
    return True


def test_fast_plan_decode_rule_on_line_under_test():
    follows = vllm_follows_flashinfer_decode()
    assert follows, "this vLLM carries its own planner call: FOLLOWS_FLASHINFER_DECODE needs a per-line rule"
    assert ("vllm" in releases.FOLLOWS_FLASHINFER_DECODE) is follows
    fi = md.version("flashinfer-python")
    assert releases.decode_passes_uniform_q_len("vllm", fi) is flashinfer_one_token_uniform_q_len(), fi
