"""flashinfer-guard core: framework-free sizing, policy, settings and patching.

Importing this package must stay cheap: it never imports torch, flashinfer,
vllm or sglang (the adapters and the CLI import submodules lazily).
"""

__version__ = "0.1.0"
TAG = "[flashinfer-guard]"
