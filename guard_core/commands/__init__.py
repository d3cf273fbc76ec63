"""The flashinfer-guard command: plan and doctor, a pipeline of named stages over the same decisions the adapters make.

May import: everything in guard_core; nothing in guard_core imports it, and no server start-up path does.
"""
