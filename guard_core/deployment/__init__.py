"""Reading a deployment: the model's attention groups, presets, server defaults per line, launch commands and the servers' own readers.

May import: the ground floor, guard_core.flashinfer (release facts) and guard_core.runtime.settings; never a decision or the CLI.
"""
