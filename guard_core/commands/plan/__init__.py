"""``flashinfer-guard plan``'s stages, one module each: command -> server (and model_source) -> model -> facts -> decide -> report, and printing.

May import: guard_core's rooms below commands and itself; only ``guard_core.commands.plan_report`` (the one entry) imports it.
"""
