"""What the vLLM and SGLang suites check the same way, written once: a launch
command read by the installed server's own parser and by the built-in reader,
the committed option table against the installed parser, and the corpus of
published config.json files read by the server's own config code.

Each function takes the framework and its installed line; the expected values
always come from the installed framework (its parser, its ModelConfig), never
from guard_core.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

from guard_core.launch_command import LaunchError, load_table, parse_launch, table_versions
from tests.common import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, "tests", "data", "model_configs")
MARK = "FLASHINFER_GUARD_GROUPS "
TPS = (1, 8)


def both(cmd: list[str], line: str, environ: dict | None = None) -> list:
    """(server reader, built-in reader) results: a Launch, or the LaunchError text."""
    out = []
    for reader in ("server", "builtin"):
        try:
            out.append(parse_launch(list(cmd), line=line, reader=reader, environ=environ or {}))
        except LaunchError as exc:
            out.append(f"refused: {exc}")
    return out


def real(cmd: str, line: str):
    """The server reader's Launch, asserting the built-in reader gives the same deployment."""
    s, b = both(cmd.split(), line)
    assert not isinstance(s, str), s
    assert not isinstance(b, str), b
    assert s.deployment() == b.deployment(), (s.deployment(), b.deployment())
    return s


def assert_option_table_is_the_installed_parsers(framework: str, version: str) -> None:
    """guard_core/server_options/<framework>-<installed>.json == what ci/dump_server_options.py
    reads from the installed parser now."""
    assert version in table_versions(framework), \
        f"no committed option table for {framework} {version}: run ci/dump_server_options.py {framework} in this env"
    spec = importlib.util.spec_from_file_location("dump_server_options", os.path.join(REPO, "ci", "dump_server_options.py"))
    dump = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dump)
    live = json.loads(json.dumps(dump.table(getattr(dump, f"{framework}_parser")())))
    committed = load_table(framework, version)
    assert committed["version"] == version

    def key(a):
        return json.dumps(a, sort_keys=True)
    assert sorted(map(key, live["actions"])) == sorted(map(key, committed["actions"]))


def corpus() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(CORPUS) if f.endswith(".json") and f != "sources.json")


def corpus_readings(reader_module: str, root: str) -> dict:
    """Every corpus config read by ``python -m <reader_module>`` (the adapter's reader,
    which builds the server's own ModelConfig offline) at TP 1 and 8, in one subprocess
    of this environment's interpreter: {name: reading}."""
    dirs = []
    for name in corpus():
        d = os.path.join(root, name)
        os.makedirs(d)
        shutil.copy(os.path.join(CORPUS, name + ".json"), os.path.join(d, "config.json"))
        dirs.append(d)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", reader_module, *dirs]
    for tp in TPS:
        cmd += ["--tp", str(tp)]
    p = forkserver.run(cmd, capture_output=True, text=True, timeout=1800, env=env, cwd=REPO)
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            r = json.loads(line[len(MARK):])
            out[os.path.basename(r["path"])] = r
    assert len(out) == len(dirs), p.stderr[-2000:]
    return out


def assert_config_files_read_alike(command: list[str], line: str, tmp_dir: str) -> None:
    """Issue 29, items 4-5. Hostile ``--config`` files (/dev/zero, a FIFO, a directory, the
    9 x 9 alias bomb, 40 levels): the server's reader and the built-in reader refuse them in
    the same one line, before the server's parser opens them. Malformed files (the issue's
    broken YAML, a list or a string at the top, a NUL byte): the server's own parser refuses
    them as a LaunchError (exit 2 in the command) in one line naming the file, never an
    exception of its own."""
    from tests.common.config_files import hostile_files, malformed_files

    for name, (path, words) in hostile_files(tmp_dir).items():
        server, builtin = both(command + ["--config", path], line)
        assert server == builtin and isinstance(server, str) and words in server, (name, server, builtin)
        assert len(server.splitlines()) == 1
    for name, path in malformed_files(tmp_dir).items():
        try:
            parse_launch(command + ["--config", path], line=line, reader="server", environ={})
        except LaunchError as exc:
            text = str(exc)
        else:
            raise AssertionError(f"{name}: the server's parser accepted it")
        assert len(text.splitlines()) == 1 and "\\n" not in text and path in text, (name, text)
        assert "own parser refuses" in text or "--config" in text, (name, text)
