"""Differential search: generated deployments through the frameworks' own code (see space.py, __main__.py)."""
