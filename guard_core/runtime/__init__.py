"""Living inside a server: the FLASHINFER_GUARD_* settings, logs, the patch table and its wrapping, the safety net, register/uninstall.

May import: the ground floor and itself; it patches what the adapters hand it and decides nothing about FlashInfer.
"""
