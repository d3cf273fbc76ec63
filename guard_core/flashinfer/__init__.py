"""FlashInfer's planner model and what each release (FlashInfer, vLLM, SGLang) does: the bytes a plan() asks for.

May import: the ground floor (guard_core.units, .versions, .gpus) and itself; never a deployment, a decision, the runtime or the CLI.
"""
