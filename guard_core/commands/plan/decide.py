"""Stage 5, ``decide``: ``guard_core.decide.workspace``'s need per group and its decision (or the
fixed-split pair), as the server runs on its own and with the guard's switches: the adapters' calls.
"""

from __future__ import annotations

from guard_core.commands.plan.records import Decided, FactsSet, ServerConfig
from guard_core.deployment.server_defaults import gpu_memory
from guard_core.runtime.settings import Settings

__all__ = ["decide", "decide_mla"]


def decide(server: ServerConfig, fs: FactsSet) -> Decided:
    """Stage 5: ``workspace_decision.need`` per group (the largest need wins, as the groups'
    builders share the buffer or each allocate the same default), then its ``decide`` (or the
    fixed-split ``assess_fixed_split``/``decide_fixed_split``) twice: as the server runs on
    its own (auto against the buffer: the verdict) and with the switches the guard reads there."""
    from guard_core.decide import workspace as wd

    needs = [(g, runner, f, wd.need(f)) for g, runner, f in fs.groups]
    top = max(needs, key=lambda r: r[3].requirement.float_bytes)
    _g, _runner, facts, computed = top
    alone = Settings(workspace="auto", workspace_max=server.settings.workspace_max)
    guard_settings = server.settings if server.settings.enabled else None
    if server.deterministic:
        mem = gpu_memory(server.gpu_key)
        mem = mem[0] if mem else None
        # the longest prompt the buffer holds: the assessment with no room above the buffer
        in_buffer = Settings(workspace="auto", workspace_max=("bytes", 0))
        fa_buf = wd.assess_fixed_split(facts, computed, server_bytes=fs.buffer, settings=in_buffer, gpu_memory=mem)
        fa = wd.assess_fixed_split(facts, computed, server_bytes=fs.buffer, settings=alone, gpu_memory=mem)
        verdict = wd.decide_fixed_split(facts, computed, fa, server_bytes=fs.buffer, settings=alone)
        guard = None
        if guard_settings is not None:
            fa_g = wd.assess_fixed_split(facts, computed, server_bytes=fs.buffer, settings=guard_settings,
                                         gpu_memory=mem)
            guard = wd.decide_fixed_split(facts, computed, fa_g, server_bytes=fs.buffer, settings=guard_settings)
        return Decided(needs, top, verdict, guard, (fa_buf, fa))
    verdict = wd.decide(facts, server_bytes=fs.buffer, user_bytes=fs.user_bytes, settings=alone, computed=computed)
    guard = None
    if guard_settings is not None:
        guard = wd.decide(facts, server_bytes=fs.buffer, user_bytes=fs.user_bytes, settings=guard_settings,
                          computed=computed)
    return Decided(needs, top, verdict, guard)


def decide_mla(mfs):
    """Stage 5 for an MLA model: ``guard_core.decide.mla.decide`` on the facts (the adapters' call)."""
    from guard_core.decide import mla as dm

    return dm.decide(mfs.facts)
