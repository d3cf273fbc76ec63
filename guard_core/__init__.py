"""flashinfer-guard core, in rooms by concern: flashinfer/ (the planner model, releases), deployment/ (reading a
deployment), decide/ (facts in, decision out), runtime/ (living inside a server), commands/ (plan, doctor);
the ground floor here (units, versions, gpus) imports nothing else of ours.

Importing this package must stay cheap: it never imports torch, flashinfer,
vllm or sglang (the adapters and the CLI import submodules lazily).
"""

__version__ = "0.1.0"
TAG = "[flashinfer-guard]"
