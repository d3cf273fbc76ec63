"""Stage 1, ``read_command``: the launch command after ``--`` as its server reads it
(``launch_command.parse_launch``), the framework it starts, and the environment the server
process sees through the command's prefixes.
"""

from __future__ import annotations

import os

from guard_core.commands.plan.records import Command, PlanUsageError
from guard_core.deployment.launch_command import LaunchError, parse_launch
from guard_core.deployment.server_defaults import framework_label

__all__ = ["split_launch", "read_command"]


def split_launch(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``plan [opts] -- CMD ...`` -> (plan argv, launch command or None)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def read_command(a, environ) -> Command:
    """Stage 1: the launch command (``_read_launch``) and the framework it starts."""
    notes: list[str] = []
    L = _read_launch(a, environ, notes)
    fw = a.framework or (L.framework if L else "vllm")
    if L and a.framework and a.framework != L.framework:
        raise PlanUsageError(f"--framework {a.framework} contradicts the launch command, which starts "
                             f"{framework_label(L.framework)}")
    return Command(L, fw, notes)


def _read_launch(a, environ, notes: list):
    """The launch command after ``--`` read as its server reads it (None without one); a
    version-tagged image sets the simulated line unless --framework-version does."""
    if getattr(a, "launch", None) is None:
        return None
    try:
        launch = parse_launch(a.launch, line=getattr(a, "framework_version", None),
                              reader=getattr(a, "launch_reader", None) or "auto",
                              environ=os.environ if environ is None else environ)
    except LaunchError as exc:
        raise PlanUsageError(str(exc)) from None
    if not getattr(a, "framework_version", None):
        # the image the command runs pins the server: simulate its line, not the one installed
        # here, where the tag names a release of a line read here; else say which line and why
        from guard_core.deployment.launch_command import image_tag_note, split_command
        from guard_core.deployment.server_defaults import DEFAULT_LINE

        form = split_command(list(a.launch))[1]
        line, why = image_tag_note(launch.framework, form)
        label = framework_label(launch.framework)
        if line:
            a.framework_version = line
            notes.append(f"simulating {label} {line}: the image tag of the launch command")
        elif why:
            notes.append(f"the launch command's image tag is not mapped to a line: {why}; simulating {label} "
                         f"{DEFAULT_LINE[launch.framework]}, the default line (--framework-version to change)")
    return launch
