"""The SGLang adapter builds its serving limits through the core's one rule (issue 26).

``sglang_guard.workspace_facts`` reads SGLang's objects (here a 0.5.5-style runner:
``server_args`` and a request pool, no runtime context) and hands the facts to
``guard_core.decide.workspace.sglang_runner_limits``, the function ``plan`` calls
for the same runners: a change to that rule reaches both, and the adapter has no
limits rule of its own.
"""

from __future__ import annotations

import types

import guard_core.decide.workspace as wd
from sglang_guard import workspace_facts as wf


def _runner(draft_worker=False, **server):
    sa = dict(disable_cuda_graph=False, cuda_graph_bs=[1, 2, 4, 8, 16], cuda_graph_max_bs=16,
              max_running_requests=None, chunked_prefill_size=8192, speculative_algorithm=None,
              enable_deterministic_inference=False)
    sa.update(server)
    return types.SimpleNamespace(server_args=types.SimpleNamespace(**sa), is_draft_worker=draft_worker,
                                 req_to_token_pool=types.SimpleNamespace(size=12),
                                 model_config=types.SimpleNamespace(context_len=4096))


def test_the_adapter_calls_the_core_rule_with_what_it_read(monkeypatch):
    seen = []
    real = wd.sglang_runner_limits

    def spy(**kw):
        seen.append(kw)
        return real(**kw)

    monkeypatch.setattr(wd, "sglang_runner_limits", spy)
    eagle = dict(speculative_algorithm="EAGLE", speculative_num_draft_tokens=4, speculative_eagle_topk=8)
    target, _ = wf._read_limits(_runner(**eagle), [])
    draft, _ = wf._read_limits(_runner(draft_worker=True, **eagle), [])
    plain, _ = wf._read_limits(_runner(), [])
    assert len(seen) == 3
    # what SGLang's objects said: its capture list, its request pool
    assert seen[0] == dict(capture_sizes=(1, 2, 4, 8, 16), max_num_seqs=12, chunk=8192, max_model_len=4096,
                           speculative=True, draft_runner=False, verify_q=4, topk=None, request_pool=12)
    assert seen[1]["draft_runner"] is True and seen[1]["topk"] == 8 and seen[1]["verify_q"] is None
    assert seen[2]["speculative"] is False
    # the rule's answers: the list cut at the pool (12) and the pool itself, as SGLang's
    # get_batch_sizes_to_capture does
    assert target.capture_sizes == draft.capture_sizes == plain.capture_sizes == (1, 2, 4, 8, 12)
    assert (target.verify_q_len, target.draft_tokens, target.one_token_graphs) == (4, 3, False)
    assert (draft.decode_requests_per_seq, draft.verify_q_len, draft.one_token_graphs) == (8, None, True)
    assert (plain.verify_q_len, plain.decode_requests_per_seq, plain.one_token_graphs) == (None, 1, True)


def test_a_changed_core_rule_reaches_the_adapter(monkeypatch):
    marker = object()
    monkeypatch.setattr(wd, "sglang_runner_limits", lambda **kw: marker)
    assert wf._read_limits(_runner(), [])[0] is marker
