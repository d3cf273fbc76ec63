"""Deciding: facts in, decision out (workspace need and buffer, fixed split, MoE backend, the KV budget), as records with one-line renderings.

May import: the ground floor, guard_core.flashinfer, guard_core.deployment and guard_core.runtime; never the CLI.
"""
