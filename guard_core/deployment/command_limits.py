"""The launch command's one error and the bounds on its JSON text and ``--config`` files.

The floor under ``launch_command`` (the built-in reader) and ``server_parsers`` (the installed
server's own parser): both refuse a command with ``LaunchError``, bound nested JSON
before ``json.loads`` recurses, and read a ``--config`` file only through
``read_config_file`` and ``check_yaml_limits`` (a regular file, at most 1 MiB read in
chunks, YAML with few aliases, a bounded expansion and a bounded depth), so that
whichever reader reads it, a hostile file gets the same one line. Nothing here imports
another guard_core module.
"""

from __future__ import annotations

import os
import re
import stat

__all__ = ["LaunchError", "MAX_JSON_DEPTH", "bounded_config_text", "check_json_text", "check_yaml_limits",
           "read_config_file"]

MAX_JSON_DEPTH = 32  # nested JSON in a launch option (json.loads recurses)
MAX_JSON_CHARS = 1 << 20
MAX_CONFIG_BYTES = 1 << 20  # a --config file
CONFIG_CHUNK = 64 << 10
MAX_YAML_ALIASES = 16  # a server config names a few anchors at most; a "billion laughs" file needs many
MAX_YAML_NODES = 100_000  # nodes once every alias is expanded (what the server's code walks)
MAX_YAML_DEPTH = MAX_JSON_DEPTH


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


def read_config_file(path: str) -> str:
    """The text of a ``--config`` file: a regular file only (never a FIFO, a device, a
    directory: opened without blocking, checked on the open descriptor), read in chunks up
    to MAX_CONFIG_BYTES, UTF-8. Anything else: ``LaunchError`` with one line."""
    where = f"--config {path!r} in the launch command"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError, TypeError) as exc:  # ValueError: a NUL byte in the path
        raise LaunchError(f"{where}: cannot read it ({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LaunchError(f"{where}: not a regular file")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, CONFIG_CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_CONFIG_BYTES:
                raise LaunchError(f"{where}: larger than {MAX_CONFIG_BYTES >> 20} MiB")
            chunks.append(chunk)
    except OSError as exc:
        raise LaunchError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeError:
        raise LaunchError(f"{where}: cannot read it (not UTF-8)") from None


def bounded_config_text(path: str) -> str:
    """A ``--config`` file's text once every bound holds (file, size, JSON and YAML nesting,
    aliases): what both readers call first, so that both refuse a hostile file in one same line."""
    text = read_config_file(path)
    check_json_text(f"--config {path}", text)
    check_yaml_limits(path, text)
    return text


# what PyYAML's reader refuses (yaml/reader.py 6.0: Reader.NON_PRINTABLE)
_NOT_YAML_RE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]")
_ALIAS_RE = re.compile(r"(?:^|[\s\[{,:-])\*[^\s,\[\]{}]+")


def check_yaml_limits(path: str, text: str) -> None:
    """Refuse (``LaunchError``) YAML whose aliases, expansion or depth exceed the bounds, before
    any reader builds it: composed with PyYAML where installed (nothing expanded), else the
    aliases counted in the text. A YAML syntax error is not ours to report: the reader says it."""
    where = f"--config {path!r} in the launch command"
    try:
        import yaml
    except ImportError:  # the built-in reader expands nothing; the same bounds, counted in the text
        _check_text_without_yaml(where, text)
        return
    loader = None
    try:
        loader = _bounded_loader(yaml, where)(text)  # its reader refuses a NUL byte already
        node = loader.get_single_node()
    except LaunchError:
        raise
    except RecursionError:
        raise LaunchError(f"{where}: YAML nested deeper than {MAX_YAML_DEPTH} levels") from None
    except Exception:  # not valid YAML: the reader reports it in its own words
        return
    finally:
        if loader is not None:
            loader.dispose()
    if node is not None and loader.aliases and _expanded(node, {}, yaml) > MAX_YAML_NODES:
        raise LaunchError(f"{where}: YAML aliases expand to more than {MAX_YAML_NODES} nodes")


def _check_text_without_yaml(where: str, text: str) -> None:
    bad = _NOT_YAML_RE.search(text)
    if bad:  # what PyYAML's reader refuses too (a NUL byte, other C0 controls): not a config
        line = text.count("\n", 0, bad.start()) + 1
        raise LaunchError(f"{where}: not YAML (control character U+{ord(bad.group()):04X} on line {line})")
    if len(_ALIAS_RE.findall(text)) > MAX_YAML_ALIASES:
        raise LaunchError(f"{where}: more than {MAX_YAML_ALIASES} YAML aliases")
    if _block_depth(text) > MAX_YAML_DEPTH:
        raise LaunchError(f"{where}: YAML nested deeper than {MAX_YAML_DEPTH} levels")


def _block_depth(text: str) -> int:
    """Nesting of block-style YAML by indentation (flow style is bounded by check_json_text)."""
    indents, deepest = [], 0
    for raw in text.splitlines():
        body = raw.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        indent = len(raw) - len(body) + (2 if body.startswith("- ") else 0)
        while indents and indents[-1] >= indent:
            indents.pop()
        indents.append(indent)
        deepest = max(deepest, len(indents))
    return deepest


def _bounded_loader(yaml, where: str):
    class Bounded(yaml.SafeLoader):
        depth = aliases = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise LaunchError(f"{where}: more than {MAX_YAML_ALIASES} YAML aliases")
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    raise LaunchError(f"{where}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1
    return Bounded


def _expanded(node, memo: dict, yaml) -> int:
    """Nodes in ``node`` with every alias expanded (aliases share nodes: counted once each, by id)."""
    key = id(node)
    if key not in memo:
        memo[key] = MAX_YAML_NODES + 1  # a cycle (a recursive anchor): refuse
        if isinstance(node, yaml.MappingNode):
            n = 1 + sum(_expanded(k, memo, yaml) + _expanded(v, memo, yaml) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(_expanded(v, memo, yaml) for v in node.value)
        else:
            n = 1
        memo[key] = min(n, MAX_YAML_NODES + 1)
    return memo[key]
