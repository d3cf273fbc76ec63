"""The records the plan's stages hand on, one per stage (``Command`` ... ``Decided``), and the
plan's one error: a bad input, one line for the user, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard_core.runtime.settings import Settings

__all__ = ["PlanUsageError", "Command", "ServerConfig", "ModelView", "FactsSet", "Decided", "RUNNER_LABELS"]

# the model runners a server sizes (facts.py builds one FactsSet entry per runner; report.py names them)
RUNNER_LABELS = {"target": "the target model's runner", "draft": "the draft model's runner, sized with the target's shape"}


class PlanUsageError(ValueError):
    """A bad input: one line for the user, exit 2."""


@dataclass
class Command:
    """Stage 1: the launch command after ``--`` as its server reads it (None without one)."""

    launch: Any
    framework: str
    notes: list


@dataclass
class ServerConfig:
    """Stage 2: the deployment the server resolves: the model's config, the GPU, the
    line's defaults, the environment the server sees and the guard's switches in it."""

    model: Any  # presets.ModelFacts
    model_source: str
    model_path: str | None
    gpu: Any
    gpu_key: str | None
    defaults: Any  # server_defaults.Defaults
    kv_dtype: str
    environ: dict  # the environment the server process sees
    environ_why: str
    settings: Settings  # the FLASHINFER_GUARD_* switches in that environment
    deterministic: bool
    record: dict  # what every plan says, sized or not
    deployment: Any  # server_defaults.Deployment: what ``defaults`` were derived from
    # why the guard does not load in the server process (guard_core.deployment.guard_loading), or None
    guard_off: str | None = None

    @property
    def line(self) -> str:
        return self.defaults.line

    @property
    def flashinfer(self) -> str:
        return self.defaults.get("flashinfer")


@dataclass
class ModelView:
    """Stage 3: the attention groups one rank plans, and who read them."""

    groups: Any  # model_groups (all layers)
    rank_groups: list
    reader: dict
    tp: int
    dcp: int
    not_applicable: str | None = None
    mla: bool = False  # the server's own reader reads an MLA model (plan answers through the MLA stages)


@dataclass
class FactsSet:
    """Stage 4: the facts records the adapter builds (one per attention group), and the sizes
    the server allocates: its own, the user's native one, the buffer checked."""

    groups: list  # [(group, runner, WorkspaceFacts)]: runner "" or SGLang's "target" / "draft"
    limits: Any
    kv_bytes: int
    planner_info: dict
    server_bytes: int
    server_source: str
    user_bytes: int | None
    buffer: int
    fixed_info: dict | None


@dataclass
class Decided:
    """Stage 5: workspace_decision's need per group and its decisions: ``verdict`` (the
    server on its own: auto against the buffer) and ``guard`` (the switches it runs with)."""

    needs: list  # [(group, runner, WorkspaceFacts, WorkspaceNeed)]
    top: tuple
    verdict: Any  # WorkspaceOutcome
    guard: Any  # WorkspaceOutcome or None (the guard off)
    fixed_split: Any = None  # (verdict assessment, guard assessment)
