"""Run the differential search at any size, in the current (framework) environment.

    python -m tests.differential --framework vllm --n 5000 --seed S [--gpus h200,b200] [--search 400]
    python -m tests.differential --framework sglang --n 200 --seed S [--search 400]
    ... [--before] [--inject]   (issue 27: the 24-batch search of before, the injected-gap test)

vLLM: each GPU is one process of tests/vllm/realcalls_scenarios.py ``gen`` (vLLM caches device
checks per process); SGLang: each deployment one process of tests/sglang/realcalls_scenarios.py
``run``. Every finding prints one line: the deployment as a launch command, the expected value
(the largest real plan), the guard's size, and the command that reruns that one deployment.
The summary line per run: deployments, planning calls, findings, how often the independent
search alone reaches the guard's need, and (``--inject``) how often it finds the injected gap.
Exit 1 when anything was found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .compare import (findings, guard_need, largest_real, ratio, search_stats, sglang_findings,
                      sglang_search_stats)
from .space import SEARCH_BUDGET, VLLM_GPUS, launch_command, sglang_cases, sglang_launch_command
from .space_sglang import sglang_wide_cases, sglang_wide_launch_command
from tests.common import forkserver

REPO = Path(__file__).resolve().parents[2]


def _env(extra_path: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith(("FLASHINFER_GUARD", "VLLM_", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))
               or k == "VLLM_CACHE_ROOT")
           and k != "PYTHONDONTWRITEBYTECODE"}
    if os.environ.get("FLASHINFER_GUARD_CACHE"):  # where the planner library is cached
        env["FLASHINFER_GUARD_CACHE"] = os.environ["FLASHINFER_GUARD_CACHE"]
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(REPO), extra_path]))
    return env


def run_vllm(gpu: str, seed: int, n: int, cubins: bool = True, timeout: int = 3600, search: int | None = None,
             before: bool = False, inject: bool = False, space: str = "shapes") -> list[dict]:
    cmd = [sys.executable, str(REPO / "tests" / "vllm" / "realcalls_scenarios.py"), "gen", "--seed", str(seed),
           "--n", str(n), "--gpu", gpu, "--phases", "guard", "--space", space] + ([] if cubins else ["--no-cubins"])
    if search is not None:
        cmd += ["--search", str(search)]
    if before:
        cmd += ["--legacy-search", "24"]
    if inject:
        cmd += ["--inject"]
    proc = forkserver.run(cmd, env=_env(str(REPO / "tests" / "vllm")), capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))
    out = [json.loads(line[len("RESULT: "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT: ")]
    if not out:
        out = [{"case": f"gen{seed}_{gpu}", "setup_error": f"no result (rc {proc.returncode}): {proc.stderr[-2000:]}"}]
    return out


def run_sglang(opts: dict, timeout: int = 1800) -> dict:
    run_opts = {k: v for k, v in opts.items() if k != "source"}
    run_opts.setdefault("phases", ["capture", "eager"])
    cmd = [sys.executable, str(REPO / "tests" / "sglang" / "realcalls_scenarios.py"), "run", json.dumps(run_opts)]
    proc = forkserver.run(cmd, env=_env(str(REPO / "tests" / "sglang")), capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"setup_error": f"rc {proc.returncode}: {proc.stderr[-2000:]}"}
    return json.loads(lines[-1][len("RESULT "):])


def _outside_standin(result: dict) -> str:
    """The stand-in's own limit, when every planning error of a record is one (the compiled planner
    instantiates the head dims tests/conformance/harness.cu names; FlashInfer JIT-compiles others on
    a GPU): the first such error, else ''."""
    errs = list(result.get("errors") or []) + list((result.get("draft") or {}).get("errors") or [])
    msgs = [str(e.get("error", "")) for e in errs]
    if msgs and all("harness:" in m and "not instantiated" in m for m in msgs):
        return msgs[0][:200]
    return ""


def rerun_command(framework: str, **kw) -> str:
    """The one command that reruns a single deployment (run in the line's environment)."""
    if framework == "vllm":
        return (f"python tests/vllm/realcalls_scenarios.py gen --phases guard --seed {kw['seed']} --n {kw['n']} "
                f"--gpu {kw['gpu']} --cases {kw['case']}" + (f" --search {kw['search']}" if kw.get("search") else "")
                + (f" --space {kw['space']}" if kw.get("space", "shapes") != "shapes" else ""))
    return f"python tests/sglang/realcalls_scenarios.py run '{json.dumps(kw['opts'])}'"


def report(results: list[dict], line: str, rerun=None) -> tuple[int, list[str]]:
    lines, bad = [], 0
    for r in results:
        found = findings(r)
        if found:
            bad += 1
            cmd = launch_command(dict(r.get("config") or {}, source=r.get("source")), (r.get("gpu") or ["?"])[0], line)
            again = f" | rerun: {rerun(r)}" if rerun else ""
            for kind, detail in found:
                lines.append(f"{kind}: {cmd} | real largest plan {largest_real(r)} B, guard {guard_need(r)} B | "
                             f"{detail}{again}")
    return bad, lines


def summarize(rows: list[dict]) -> str:
    """Per run: how often the independent search alone reaches the guard's need, and the injected gap."""
    n = len(rows)
    reach = sum(r["reach"] for r in rows)
    near = sum(r["near"] for r in rows)
    wit = sum(r["witness_ok"] for r in rows)
    inj = [r for r in rows if r.get("injected")]
    s = (f"independent search reaches the guard's need in {reach}/{n} (within 1 MiB {near}/{n}); "
         f"the guard's own batches reach it in {wit}/{n}")
    if inj:
        s += f"; injected gap found {sum(r['found_after'] for r in inj)}/{len(inj)}"
        before = [r for r in inj if r.get("found_before") is not None]
        if before:
            s += f" (before issue 27's search: {sum(r['found_before'] for r in before)}/{len(before)})"
    return s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.differential")
    p.add_argument("--framework", default="vllm", choices=["vllm", "sglang"])
    p.add_argument("--n", type=int, default=10, help="deployments per GPU (vLLM) or in all (SGLang)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpus", default=",".join(VLLM_GPUS))
    p.add_argument("--space", default="wide", choices=["wide", "shapes", "narrow"],
                   help="wide: vLLM, published models built by vLLM with wider limits (vllm_space.py); SGLang, "
                        "deployments SGLang resolves itself (issue 27 item 4). shapes (= narrow): the space of "
                        "before (vLLM: the shapes of space.py; SGLang: sglang_cases)")
    p.add_argument("--search", type=int, default=SEARCH_BUDGET, help="evaluations of the worst-case search")
    p.add_argument("--before", action="store_true", help="also run the 24-batch search of before issue 27")
    p.add_argument("--inject", action="store_true", help="the injected-gap test of the search")
    p.add_argument("--json", default="", help="write every record here (one JSON per line)")
    args = p.parse_args(argv)
    import importlib.metadata as md

    t0 = time.time()
    rows, lines, bad, calls, ratios, results, notes = [], [], 0, 0, [], [], []
    refused, outside = [], []
    if args.framework == "vllm":
        line = f"vllm-{md.version('vllm')}"
        for gpu in args.gpus.split(","):
            res = run_vllm(gpu, args.seed, args.n, search=args.search, before=args.before, inject=args.inject,
                           space="wide" if args.space == "wide" else "shapes")
            b, ls = report(res, line, rerun=lambda r, gpu=gpu: rerun_command(
                "vllm", seed=args.seed, n=args.n, gpu=gpu, case=r.get("case"), search=args.search,
                space="wide" if args.space == "wide" else "shapes"))
            bad, lines = bad + b, lines + ls
            for r in res:
                if not r.get("setup_error"):
                    rows += search_stats(r)
            calls += sum(len(r.get("calls") or []) for r in res)
            ratios += [x for x in (ratio(r) for r in res) if x]
            results += res
    else:
        line = f"sglang-{md.version('sglang')}"
        cases, launch = ((sglang_wide_cases, sglang_wide_launch_command) if args.space == "wide"
                         else (sglang_cases, sglang_launch_command))
        for opts in cases(args.seed, args.n):
            opts = dict(opts, search=args.search, inject=args.inject, draft_eager=True,
                        **({"legacy_search": 12} if args.before else {}))
            r = run_sglang(opts)
            r["opts"] = opts
            results.append(r)
            if r.get("refused"):  # SGLang's own resolution refuses the launch: no server, not a finding
                refused.append(f"refused by SGLang {md.version('sglang')}: {launch(opts, line)} | {r['refused']}")
                continue
            if _outside_standin(r):  # the stand-in cannot plan it (a head dim the harness does not build)
                outside.append(f"outside the stand-in: {launch(opts, line)} | {_outside_standin(r)}")
                continue
            # the draft's eager decode and (issue 27) its draft-extend backend are replayed: the draft
            # envelope is compared in both directions, an "over" on it is a finding
            found = [("setup", r["setup_error"])] if r.get("setup_error") else sglang_findings(r)
            if found:
                bad += 1
                run_opts = {k: v for k, v in opts.items() if k != "source"}
                for kind, detail in found:
                    lines.append(f"{kind}: {launch(opts, line)} | {detail} | rerun: "
                                 f"{rerun_command('sglang', opts=run_opts)}")
            if not r.get("setup_error"):
                rows += sglang_search_stats(r)
                calls += len(r.get("calls") or []) + len((r.get("draft") or {}).get("calls") or [])
    for ln in lines + notes + refused + outside:
        print(ln)
    if args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps(r, default=str) + "\n")
    print(f"{line}: {len(results)} deployments, {calls} planning calls, {bad} with findings"
          + (f", largest guard/real {max(ratios, default=0):.3f}" if ratios else "")
          + f", {time.time() - t0:.0f} s")
    print(f"{line}: " + summarize(rows))
    if refused or outside:
        print(f"{line}: not compared: {len(refused)} refused by the server's own resolution, {len(outside)} outside "
              f"the stand-in (listed above)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
