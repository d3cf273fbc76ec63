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
import random
import shutil
import sys

from guard_core.deployment.launch_command import LaunchError, load_table, parse_launch, table_versions
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
    """guard_core/deployment/server_options/<framework>-<installed>.json == what ci/dump_server_options.py
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
    return readings(reader_module, CORPUS, corpus(), root)


def readings(reader_module: str, source: str, names, root: str, tps=TPS, run=None) -> dict:
    """The configs ``<source>/<name>.json`` read by ``python -m <reader_module>`` at ``tps``, all in
    one subprocess of this interpreter (``run``: default the scenario runner): {name: reading}."""
    dirs = []
    for name in names:
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(source, name + ".json"), os.path.join(d, "config.json"))
        dirs.append(d)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", reader_module, *dirs]
    for tp in tps:
        cmd += ["--tp", str(tp)]
    p = (run or forkserver.run)(cmd, capture_output=True, text=True, timeout=1800, env=env, cwd=REPO)
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


# ------------------------------------------------------------------ issue 29, item 4: the agreement property
#
# Generated launch commands, each read three ways: the installed server's own parser on the bare
# server command (the ground truth), and the server's parser and the built-in reader on the same
# command behind a generated prefix (VAR=value, env, docker/podman run, uv run, python options).
# Required: all three accept or all three refuse; where they accept, the same resolved deployment,
# and the server's workspace variable seen exactly where the prefix passes it to the server (an
# expectation the generator computes from the prefix it wrote, never from guard_core).

# `docker run --help` (Docker 27) and `podman run --help` (Podman 5): the options that take a value
DOCKER_VALUE_OPTIONS = """--add-host --annotation --attach --blkio-weight --blkio-weight-device --cap-add --cap-drop
--cgroup-parent --cgroupns --cidfile --cpu-count --cpu-percent --cpu-period --cpu-quota --cpu-rt-period
--cpu-rt-runtime --cpu-shares --cpus --cpuset-cpus --cpuset-mems --detach-keys --device --device-cgroup-rule
--device-read-bps --device-read-iops --device-write-bps --device-write-iops --dns --dns-opt --dns-option
--dns-search --domainname --entrypoint --expose --gpus --group-add --health-cmd --health-interval
--health-retries --health-start-interval --health-start-period --health-timeout --hostname --io-maxbandwidth
--io-maxiops --ip --ip6 --ipc --isolation --kernel-memory --label --label-file --link --link-local-ip
--log-driver --log-opt --mac-address --memory --memory-reservation --memory-swap --memory-swappiness --mount
--name --network --net --network-alias --oom-score-adj --pid --pids-limit --platform --publish --pull --restart
--runtime --security-opt --shm-size --stop-signal --stop-timeout --storage-opt --sysctl --tmpfs --ulimit --user
--userns --uts --volume --volume-driver --volumes-from --workdir""".split()
PODMAN_VALUE_OPTIONS = """--arch --authfile --cert-dir --cgroup-conf --cgroups --chrootdirs --conmon-pidfile --creds
--decryption-key --gidmap --group-entry --hooks-dir --hostuser --image-volume --init-path --os --passwd-entry
--personality --pidfile --pod --pod-id-file --preserve-fds --rdt-class --requires --retry --retry-delay
--sdnotify --seccomp-policy --secret --shm-size-systemd --subgidname --subuidname --systemd --timeout --uidmap
--umask --unsetenv --variant""".split()
DOCKER_SHORT_VALUES = {"-a": "stdout", "-c": "512", "-h": "box", "-l": "k=v", "-m": "64g", "-p": "8000:8000",
                       "-u": "1000", "-v": "/data:/data", "-w": "/work"}
DOCKER_FLAGS = ["-d", "-i", "-t", "-it", "-itd", "--rm", "--init", "--privileged", "-P", "--read-only",
                "--sig-proxy=false", "--no-healthcheck", "--oom-kill-disable", "-q"]
ENV_FLAGS = [["-v"], ["-0"], ["--debug"], ["-C", "/tmp"], ["-C/tmp"], ["--chdir=/tmp"], ["--chdir", "/tmp"],
             ["-a", "server"], ["--argv0=server"], ["--block-signal"], ["--default-signal=INT"],
             ["--ignore-signal"], ["--list-signal-handling"]]
UV_OPTIONS = [["--with", "vllm"], ["--python", "3.12"], ["-p", "3.12"], ["--python=3.12"], ["--no-sync"],
              ["--frozen"], ["--isolated"], ["-q"], ["--no-project"], ["--with-requirements", "r.txt"],
              ["--extra", "cu128"], ["--index-url", "https://x"], ["-i", "https://x"]]
PY_OPTIONS = [["-X", "dev"], ["-Xfaulthandler"], ["-u"], ["-B"], ["-s"], ["-W", "ignore"], ["-Werror"], ["-E"],
              ["-X", "importtime"], ["-O"], ["-I"]]
NATIVE = {"vllm": "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", "sglang": "SGLANG_FLASHINFER_WORKSPACE_SIZE"}
MODULE = {"vllm": "vllm.entrypoints.openai.api_server", "sglang": "sglang.launch_server"}
IMAGE = {"vllm": "vllm/vllm-openai:latest", "sglang": "lmsysorg/sglang:latest"}


def _abbrev(opt: str, options: set, rng) -> str:
    """A unique prefix of ``opt`` among the parser's long options (argparse's abbreviations)."""
    for n in range(5, len(opt)):
        p = opt[:n]
        if [o for o in options if o.startswith(p)] == [opt] and rng.random() < 0.5:
            return p
    return opt


def _spell(rng, framework: str, options: set, opt: str, values: list) -> list:
    """One option as users write it: its own spelling, ``_`` for ``-`` (vLLM maps it; SGLang's
    argparse does not), a unique prefix, ``--opt=value``."""
    r = rng.random()
    if opt.startswith("--") and r < 0.15:
        opt = "--" + opt[2:].replace("-", "_")
    elif opt.startswith("--") and r < 0.3:
        opt = _abbrev(opt, options, rng)
    if len(values) == 1 and opt.startswith("--") and rng.random() < 0.25:
        return [f"{opt}={values[0]}"]
    return [opt, *values]


def _vllm_parts(rng, options: set, tmp) -> list:
    ints = ["1", "2", "4", "8", "\uff18", "+2", "0", "two", " 4", "0_4", "\u0664"]
    choices = [
        (["-tp", "--tensor-parallel-size"], ints),
        (["-dp", "--data-parallel-size"], ["1", "2", "\uff12"]),
        (["-pp", "--pipeline-parallel-size"], ["1", "2"]),
        (["--max-num-seqs"], ["64", "+64", "\uff16\uff14", "6_4", " 256", "many", "1e3", "0", "528"]),
        (["--max-num-batched-tokens"], ["8192", "16k", "8.19k", "\uff11\uff16k", "16K", "2.5K", "32k", "4.35k",
                                        "0.3k", "1.1k", "9" * 400 + "k", "2m"]),
        (["--max-model-len"], ["32k", "auto", "-1", "32K", "8.19k", "\uff14\uff10\uff19\uff16", "AUTO", "131.072k"]),
        (["--kv-cache-dtype"], ["auto", "fp8", "fp8_e4m3", "fp9"]),
        (["--block-size"], ["16", "32", "\uff11\uff16", "x"]),
        (["--port"], ["8000", "\uff18\uff10\uff10\uff10", "http"]),
        (["--gpu-memory-utilization"], ["0.85", "x", "\uff10.9"]),
        (["--max-cudagraph-capture-size"], ["64", "512", "\uff16\uff14"]),
        (["--served-model-name"], ["a", "a\nb"]),
        (["--max-lora-rank"], ["16", "64"]),
        (["--seed"], ["1", "x"]),
    ]
    parts = []
    for names, vals in choices:
        if rng.random() < 0.22:
            parts.append(_spell(rng, "vllm", options, rng.choice(names), [rng.choice(vals)]))
    for flag in (["--enforce-eager", "--no-enforce-eager"], ["--enable-chunked-prefill", "--no-enable-chunked-prefill"],
                 ["--trust-remote-code"], ["-ep", "--enable-expert-parallel", "--no-enable-expert-parallel"]):
        if rng.random() < 0.15:
            parts.append(_spell(rng, "vllm", options, rng.choice(flag), []))
    sizes = [str(s) for s in sorted(rng.sample([1, 2, 4, 8, 16, 64, 256, 512], rng.randint(1, 4)))]
    r = rng.random()
    if r < 0.12:
        parts.append(_spell(rng, "vllm", options, "--cudagraph-capture-sizes", []) + sizes)
    elif r < 0.2:
        parts.append(["-cc.cudagraph_capture_sizes", "[" + ",".join(sizes) + "]"])
    elif r < 0.26:
        parts.append([rng.choice(["-cc", "--compilation-config"]), json.dumps({"cudagraph_capture_sizes": sizes})])
    elif r < 0.3:
        parts.append(["-cc.cudagraph_capture_sizes+", ",".join(sizes)])
    r = rng.random()
    if r < 0.08:
        parts.append([rng.choice(["-cc.cudagraph_mode", "--compilation-config.cudagraph_mode"]),
                      rng.choice(["NONE", "FULL", "PIECEWISE", "null"])])
    elif r < 0.12:
        parts.append(["-O.cudagraph_mode", "NONE"])
    elif r < 0.2 and "--optimization-level" in options:
        parts.append(rng.choice([["-O", rng.choice(["0", "3"])], [f"-O{rng.randint(0, 3)}"], ["-O=2"],
                                 ["--optimization-level", "1"]]))
    r = rng.random()
    if r < 0.1:
        parts.append(["-sc", json.dumps({"method": "eagle3", "model": "x", "num_speculative_tokens": rng.randint(1, 4)})])
    elif r < 0.16:
        parts += [["-sc.method", rng.choice(["eagle3", "mtp"])], ["-sc.num_speculative_tokens=" + str(rng.randint(1, 3))]]
    if rng.random() < 0.05:
        parts.append([rng.choice(["--no-such-option", "--tp_size", "--tp-size"]), "4"])
    if rng.random() < 0.1:
        cfg = tmp / f"c{rng.randint(0, 1 << 30)}.{rng.choice(['yaml', 'yaml', 'yml', 'txt'])}"
        cfg.write_text(rng.choice(["max-num-seqs: 96\ntensor-parallel-size: 2\n",
                                   "enforce-eager: false\nmax-num-seqs: 32\n",
                                   "enable-chunked-prefill: false\ncompilation-config:\n  max_cudagraph_capture_size: 128\n"]))
        parts.append(["--config", str(cfg)])
    return parts


def _sglang_parts(rng, options: set, tmp) -> list:
    tp = [o for o in ("--tp", "--tp-size", "--tensor-parallel-size") if o in options]
    choices = [
        (tp + ["--tp_size"], ["1", "2", "4", "8", "\uff18", "+2", "x"]),
        (["--dp-size", "--dp"], ["1", "2", "\uff12"]),
        (["--max-running-requests"], ["16", "64", "\uff16\uff14", "6_4", "many"]),
        (["--chunked-prefill-size"], ["2048", "8192", "-1", "\uff18\uff11\uff19\uff12", "8k"]),
        (["--context-length"], ["4096", "32768", "32k"]),
        (["--kv-cache-dtype"], ["auto", "fp8_e4m3", "fp9"]),
        (["--page-size"], ["1", "16", "64", "\uff16\uff14"]),
        (["--attention-backend"], ["flashinfer", "fa3", "triton", "nope"]),
        (["--port"], ["30000", "\uff13\uff10\uff10\uff10\uff10", "http"]),
        (["--mem-fraction-static"], ["0.8", "x"]),
        (["--served-model-name"], ["a", "a\nb"]),
        (["--cuda-graph-max-bs-decode" if "--cuda-graph-max-bs-decode" in options else "--cuda-graph-max-bs"],
         ["8", "64", "160", "\uff16\uff14"]),
    ]
    parts = []
    for names, vals in choices:
        if rng.random() < 0.22:
            parts.append(_spell(rng, "sglang", options, rng.choice(names), [rng.choice(vals)]))
    bs = "--cuda-graph-bs-decode" if "--cuda-graph-bs-decode" in options else "--cuda-graph-bs"
    if rng.random() < 0.2:
        parts.append([bs] + [str(b) for b in sorted(rng.sample([1, 2, 4, 8, 16, 32, 64], rng.randint(1, 4)))])
    for flag in (["--disable-cuda-graph"], ["--disable-cuda-graph-padding"], ["--trust-remote-code"],
                 ["--enable-dp-attention"]):
        if rng.random() < 0.1:
            parts.append(_spell(rng, "sglang", options, flag[0], []))
    if rng.random() < 0.1:
        parts += [["--speculative-algorithm", "EAGLE"], ["--speculative-num-draft-tokens", str(rng.randint(2, 5))]]
    if rng.random() < 0.05:
        parts.append(["--no-such-option", "4"])
    if rng.random() < 0.1:
        cfg = tmp / f"c{rng.randint(0, 1 << 30)}.yaml"
        cfg.write_text("max-running-requests: 96\nchunked-prefill-size: 4096\n")
        parts.append(["--config", str(cfg)])
    return parts


def _server_command(rng, framework: str, options: set, tmp) -> list:
    """The bare server command (what the server's own parser receives, with its head)."""
    parts = (_vllm_parts if framework == "vllm" else _sglang_parts)(rng, options, tmp)
    rng.shuffle(parts)
    flat = [t for p in parts for t in p]
    if rng.random() < 0.1:  # `--` somewhere: positionals after it
        at = rng.randint(0, len(flat))
        flat = flat[:at] + ["--"] + flat[at:]
    model = rng.choice(["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B"])
    if framework == "vllm":
        form = rng.random()
        if form < 0.45:
            return ["vllm", "serve", model] + flat
        if form < 0.6:
            return ["vllm", "serve"] + flat + ["--model", model]
        if form < 0.8:
            return ["vllm", "serve", "--model", model] + flat
        return ["python3", "-m", MODULE["vllm"], "--model", model] + flat
    head = ["python3", "-m", MODULE["sglang"]] if rng.random() < 0.7 or "sglang" not in options else ["sglang", "serve"]
    return head + [rng.choice(["--model-path", "--model"]), model] + flat


def _prefix(rng, framework: str, cmd: list, tmp) -> tuple[list, str | None]:
    """``cmd`` behind generated prefixes; (command, the native workspace variable's value the
    server sees, or None), simulated here from the prefixes as written."""
    var = NATIVE[framework]
    value = rng.choice(["536870912", "\uff15\uff13\uff16\uff18\uff17\uff10\uff19\uff11\uff12", "1073741824"])
    seen = None  # the variable's value in the environment at this point (environ is empty)
    out: list = []
    kind = rng.choice(["none", "assign", "env", "docker", "podman", "uv", "uv-m", "python", "env+docker"])
    if kind == "none":
        return cmd, None
    if kind in ("assign", "env", "env+docker") or rng.random() < 0.3:
        if rng.random() < 0.5:
            out.append(f"{var}={value}")
            seen = value
        out.append("OTHER=1")
    if kind in ("env", "env+docker"):
        out.append("env")
        for opt in rng.sample(ENV_FLAGS, rng.randint(0, 3)):
            out += opt
        r = rng.random()
        if r < 0.2:
            out.append(rng.choice(["-i", "--ignore-environment", "-iv", "-"]))
            seen = None
        elif r < 0.4:
            out += rng.choice([["-u", var], [f"-u{var}"], [f"--unset={var}"], ["--unset", var]])
            seen = None
        if rng.random() < 0.5:
            out.append(f"{var}={value}")
            seen = value
        if rng.random() < 0.3:
            out.append("--")
    if kind in ("docker", "podman", "env+docker"):
        tool = "podman" if kind == "podman" else "docker"
        out += [tool, "run"]
        names = DOCKER_VALUE_OPTIONS + (PODMAN_VALUE_OPTIONS if tool == "podman" else [])
        opts = [[o, "x1"] if rng.random() < 0.6 else [f"{o}=x1"] for o in rng.sample(names, rng.randint(1, 4))]
        opts += [[k, v] if rng.random() < 0.5 else [k + v] for k, v in rng.sample(sorted(DOCKER_SHORT_VALUES.items()), 2)]
        opts += [[f] for f in rng.sample(DOCKER_FLAGS, 2)]
        client, seen = seen, None
        r = rng.random()
        if r < 0.2:
            opts.append(rng.choice([["-e", f"{var}={value}"], [f"-e{var}={value}"], [f"--env={var}={value}"],
                                    ["--env", f"{var}={value}"], [f"-e={var}={value}"], ["-ite", f"{var}={value}"]]))
            seen = value
        elif r < 0.35:
            envfile = tmp / f"e{rng.randint(0, 1 << 30)}.env"
            envfile.write_text(f"# generated\n{var}={value}\nOTHER=2\n")
            opts.append(rng.choice([["--env-file", str(envfile)], [f"--env-file={str(envfile)}"]]))
            seen = value
        elif r < 0.5:
            opts.append(rng.choice([["-e", var], [f"-e{var}"]]))  # passes the client's value
            seen = client
        rng.shuffle(opts)
        out += [t for o in opts for t in o]
        out.append(IMAGE[framework])
        if framework == "vllm" and cmd[:2] == ["vllm", "serve"] and rng.random() < 0.6:
            return out + cmd[2:], seen  # the image's entry point is `vllm serve`
        return out + cmd, seen
    if kind in ("uv", "uv-m"):
        out += ["uv", "run"]
        for opt in rng.sample(UV_OPTIONS, rng.randint(0, 3)):
            out += opt
        if kind == "uv-m" and cmd[0].startswith("python"):
            return out + [rng.choice(["-m", "--module"])] + cmd[2:], seen
        if rng.random() < 0.3:
            out.append("--")
        return out + cmd, seen
    if kind == "python" and cmd[0].startswith("python"):
        out.append(cmd[0])
        for opt in rng.sample(PY_OPTIONS, rng.randint(1, 3)):
            out += opt
        if rng.random() < 0.3:
            out += [f"-um{cmd[2]}"]
        else:
            out += ["-m", cmd[2]]
        return out + cmd[3:], seen
    return out + cmd, seen


def _read(cmd: list, line: str, reader: str):
    try:
        return parse_launch(list(cmd), line=line, reader=reader, environ={})
    except LaunchError as exc:
        text = str(exc)
        assert "\n" not in text, text
        return f"refused: {text}"


def _one_line(launch) -> bool:
    """Everything the report prints from a Launch fits on its line (issue 29: a raw newline in an
    option value broke the report)."""
    return all("\n" not in str(x) for x in launch.ignored + launch.not_read + launch.notes)


def assert_readers_agree_on_generated_commands(framework: str, line: str, options: set, tmp, seed: int,
                                               count: int) -> int:
    """The property on ``count`` generated commands; returns how many were accepted by the
    server. Every disagreement is collected and reported together."""
    rng = random.Random(seed)
    bad, accepted = [], 0
    for _ in range(count):
        bare = _server_command(rng, framework, options, tmp)
        cmd, native = _prefix(rng, framework, bare, tmp)
        truth = _read(bare, line, "server")
        s, b = _read(cmd, line, "server"), _read(cmd, line, "builtin")
        kinds = [isinstance(x, str) for x in (truth, s, b)]
        if len(set(kinds)) != 1:
            bad.append((cmd, truth if isinstance(truth, str) else "accepted", s if isinstance(s, str) else "accepted",
                        b if isinstance(b, str) else "accepted"))
            continue
        if kinds[0]:
            continue
        accepted += 1
        want = dict(truth.deployment(), workspace_bytes=int(native) if native is not None else None, image_line=None)
        got_s, got_b = dict(s.deployment(), image_line=None), dict(b.deployment(), image_line=None)
        if not (got_s == want == got_b):
            bad.append((cmd, {k: (want.get(k), got_s.get(k), got_b.get(k)) for k in want
                              if not want.get(k) == got_s.get(k) == got_b.get(k)}))
        elif s.ignored != b.ignored or len(s.not_read) != len(b.not_read):
            bad.append((cmd, "lists", s.ignored, b.ignored, s.not_read, b.not_read))
        elif not (_one_line(s) and _one_line(b)):
            bad.append((cmd, "a line break in what the report prints", s.ignored, s.not_read))
    assert not bad, f"{len(bad)} of {count} generated commands disagree; first ones: {bad[:4]}"
    return accepted
