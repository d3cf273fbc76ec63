"""FlashInfer planner stand-in for real-calls tests (see README.md)."""
