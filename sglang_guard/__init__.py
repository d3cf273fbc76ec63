"""flashinfer-guard adapter for SGLang.

Loaded by SGLang's plugin loader (entry point ``sglang.srt.plugins``, name
``flashinfer_guard`` -> ``sglang_guard.plugin:register``, SGLang >= 0.5.11) or,
on older lines, by the ``flashinfer_guard_sglang.pth`` bootstrap
(``sglang_guard._pth``). Importing this package is cheap: nothing here imports
torch, flashinfer or sglang.
"""
