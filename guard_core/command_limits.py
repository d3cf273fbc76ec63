"""The launch command's one error and the bounds on its JSON text.

The floor under ``launch`` (the built-in reader) and ``server_parsers`` (the installed
server's own parser): both refuse a command with ``LaunchError`` and bound nested JSON
before ``json.loads`` recurses. Nothing here imports another guard_core module.
"""

from __future__ import annotations

__all__ = ["LaunchError", "MAX_JSON_DEPTH", "check_json_text"]

MAX_JSON_DEPTH = 32  # nested JSON in a launch option (json.loads recurses)
MAX_JSON_CHARS = 1 << 20


class LaunchError(ValueError):
    pass


def _json_depth_ok(text: str) -> bool:
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def check_json_text(opt: str, text: str) -> None:
    if len(text) > MAX_JSON_CHARS or not _json_depth_ok(text):
        raise LaunchError(f"{opt} in the launch command: JSON nested deeper than {MAX_JSON_DEPTH} levels or longer "
                          f"than {MAX_JSON_CHARS} characters")
