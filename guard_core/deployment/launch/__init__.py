"""The parts of reading a launch command (the entry is ``guard_core.deployment.launch_command.parse_launch``):
prefixes, the server's environment, bounded values, --config YAML, option tables, pre-processing, resolution.

May import: what guard_core.deployment may (the ground floor, guard_core.flashinfer, runtime.settings) and the
deployment modules under it (command_limits, deployment_record, server_defaults, server_parsers); nothing imports
it but launch_command.
"""
