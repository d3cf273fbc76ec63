"""Hostile and malformed ``--config`` files, written once for every reader's tests (issue 29,
items 4-5): tests/core/test_config_limits.py (the built-in reader without PyYAML) and the
framework suites' launch-parser tests (both readers of the installed server, with PyYAML)."""

from __future__ import annotations

import os

NAMES = "abcdefghijklmnopqrstuvwxyz"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The issue's bomb: ``levels`` anchors, each a list of ``width`` aliases of the one before,
    the last one under ``speculative-config:`` (9 ** 9 leaves once expanded)."""
    lines = ["model: m", "a: &a [" + ",".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"{NAMES[i]}: &{NAMES[i]} [" + ",".join([f"*{NAMES[i - 1]}"] * width) + "]")
    lines.append(f"speculative-config: *{NAMES[levels - 1]}")
    return "\n".join(lines) + "\n"


def too_deep(levels: int = 40) -> str:
    return "speculative-config:\n" + "".join("  " * i + "a:\n" for i in range(1, levels)) + "  " * levels + "a: 1\n"


def hostile_files(tmp_path, with_yaml: bool = True) -> dict:
    """name -> (path, the words every reader's refusal must hold)."""
    fifo = os.path.join(tmp_path, "fifo.yaml")
    os.mkfifo(fifo)
    bomb, deep = os.path.join(tmp_path, "bomb.yaml"), os.path.join(tmp_path, "deep.yaml")
    with open(bomb, "w") as f:
        f.write(alias_bomb())
    with open(deep, "w") as f:
        f.write(too_deep())
    wide = os.path.join(tmp_path, "wide.yaml")  # within the alias budget, 16 x 10,001 nodes expanded
    with open(wide, "w") as f:
        f.write("model: m\na: &a [" + ",".join(["1"] * 10_000) + "]\nspeculative-config: [" + ",".join(["*a"] * 16) + "]\n")
    out = {"dev_zero": ("/dev/zero", "not a regular file"), "fifo": (fifo, "not a regular file"),
           "directory": (str(tmp_path), "not a regular file"),
           "alias_bomb": (bomb, "more than 16 YAML aliases"),
           "too_deep": (deep, "YAML nested deeper than 32 levels")}
    if with_yaml:  # counted only once composed (PyYAML); the built-in reader without it expands nothing
        out["wide_aliases"] = (wide, "YAML aliases expand to more than 100000 nodes")
    return out


# the malformed files: what the server's own parser raised as "internal error"
MALFORMED = {"malformed": "a: [1, 2\n  b: }\n", "top_list": "- a\n- b\n", "top_string": "just a string\n",
             "nul_byte": "model: m\x00\nmax-num-seqs: 4\n"}


def malformed_files(tmp_path) -> dict:
    out = {}
    for name, text in MALFORMED.items():
        path = os.path.join(tmp_path, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(text)
        out[name] = path
    return out
