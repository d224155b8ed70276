"""The GPU steps of tools/gpu_check.py (phase 2): run only where torch sees a GPU, never by --dry.

Every training goes through lmgrid's own entry point, lmgrid.neural.train.run, with the workflow's placement
("cuda <precision>"), so what is measured is what a `make run` job does.  Resume runs are children of their own
(`python -c`, the absent modules blocked as in the parent) so that one can be killed for real.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from gpu_check import BLOCK, PYTEST, REPO, CheckFailed, run_child, test_selection

TOOLS = Path(__file__).resolve().parent
PRECISIONS = ("bf16-mixed", "32-true")
OUTPUTS = ("full", "adaptive")
IEEE = {"cuda.matmul": "ieee", "cudnn.rnn": "ieee"}  # what metrics.json must say a GPU run trained with
# The resumed run's epoch 2 against the uninterrupted one's, relative valid PPL.  Resuming restores weights,
# optimizer, schedule, epoch log, and the seeds of dropout and batch order are functions of (seed, epoch), so on
# the CPU the two are bit-equal (tests/test_warm.py).  On the GPU, `deterministic: true` makes torch pick
# deterministic kernels where it has them but only warns where it has none (Lightning's "warn"), and cuBLAS is
# deterministic only with CUBLAS_WORKSPACE_CONFIG set, which lmgrid does not set: float sums may be reordered
# between two runs.  That noise, after two short epochs, is expected orders of magnitude below 1e-4; a resume that
# lost state (a dropout stream, the data order, the optimizer) is expected far above it.  The epoch-1 difference,
# same computation in both runs, is reported as the measured noise.
RESUME_TOL = 1e-4
STEPS = (
    ("gpu", "GPU, driver, torch, CUDA and cuDNN versions; what `precision: auto` resolves to, and why"),
    ("tests", "the collected tests, run against the GPU (pytest; counts from its JUnit XML)"),
    ("medium-bf16", "the medium cell, one epoch (--max-train-tokens) in bf16-mixed: tokens/s, peak memory, valid PPL"),
    ("medium-fp32", "the medium cell, one short epoch (--short-tokens) in 32-true"),
    ("archs", "every arch and impl x full/adaptive softmax x bf16-mixed/32-true, --arch-tokens each"),
    ("resume", "the medium cell SIGKILLed at the start of epoch 2, resumed; epoch 2 against an uninterrupted run"),
    ("warm", "a warm server with CUDA initialised refuses to fork a job; one without CUDA forks it"),
    ("identity", "the cell's placement param and checkpoint fingerprint on cuda differ from the CPU's"),
)
CHILD = f"sys.path.insert(0, {str(TOOLS)!r})\nfrom gpu_check_steps import child\nsys.exit(child(sys.argv[1]))\n"
SERVER = """import os, torch
if os.environ.get("GPU_CHECK_INIT_CUDA") == "1":
    torch.zeros(1, device="cuda")
    print("server: CUDA initialised:", torch.cuda.is_initialized(), flush=True)
from lmgrid.orchestration import warm
warm.serve(sys.argv[1], int(sys.argv[2]), idle_s=120, run=lambda argv: 0)
"""


# The optimiser of the archs the medium preset does not train (each arch's own recipe from presets/seed_table.yaml):
# at the medium cell's SGD lr 20 the Transformer diverged within 5 steps, on the GPU and on a CPU alike (first GPU
# run, 2026-11-27). The arch runs check the code path on the GPU in each precision, not a recipe.
OUTSIDE_PRESET = {"ffnn": {"optimizer": "adam", "lr": 0.001, "clip": 1.0},
                  "transformer": {"optimizer": "adam", "lr": 0.001, "clip": 1.0}}


def arch_runs() -> list[tuple[str, str, str, str]]:
    from lmgrid.run.key import IMPLS, NEURAL_ARCHS

    return [(arch, impl, out, p) for p in PRECISIONS for arch in NEURAL_ARCHS
            for impl in IMPLS.get(arch, ("torch",)) for out in OUTPUTS]


def plan(check) -> dict:
    a = check.args
    return {"steps": [name for name, _ in STEPS], "cell": check.fig.get("config", {}).get("cell"),
            "bf16_epoch_tokens": a.max_train_tokens or "a full epoch", "short_tokens": a.short_tokens,
            "arch_runs": [" ".join(r) for r in arch_runs()], "arch_tokens": a.arch_tokens, "budget_s": a.budget_s}


def train(check, corpus: dict, name: str, key, hp: dict, precision: str) -> dict:
    """One lmgrid training run on the GPU; its figures and peak GPU memory (run folder removed afterwards)."""
    import torch
    from lmgrid.neural import train as train_mod
    from lmgrid.run.spec import hand_spec

    run_dir, ckpt_dir = check.work / "runs" / name, check.work / "ckpt" / name
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    m = train_mod.run(hand_spec(arch=key.arch, impl=key.impl, n_step=key.n_step, layers=key.layers,
                                regime=key.regime, seed=key.seed, paths=corpus["paths"], vocab_path=corpus["vocab"],
                                run_dir=str(run_dir), ckpt_dir=str(ckpt_dir), hp=hp, placement=f"cuda {precision}"))
    peak = torch.cuda.max_memory_allocated() / 2**20
    shutil.rmtree(run_dir, ignore_errors=True)
    if not m["device"].startswith("cuda:") or m["precision"] != precision or m["fp32_precision"] != IEEE:
        raise CheckFailed(f"{name}: trained on {m['device']} in {m['precision']} with float32 "
                          f"{m['fp32_precision']}, not on cuda in {precision} with {IEEE}")
    return {"name": m["name"], "precision": precision, "train_tokens": m["train_tokens"],
            "train_tokens_per_s": round(m["train_tokens_per_s"]), "eval_tokens_per_s": round(m["eval_tokens_per_s"]),
            "peak_mib": round(peak), "valid_ppl": round(m["valid"]["ppl"], 3), "test_ppl": round(m["test"]["ppl"], 3),
            "params": m["params"], "wall_s": m["wall_s"]}


def step_gpu(check) -> dict:
    import torch
    from lmgrid.neural.precision import resolve_precision

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=60).stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        driver = "unknown (no nvidia-smi)"
    props = torch.cuda.get_device_properties(0)
    precision, why = resolve_precision("auto", cuda=True)
    fig = {"name": torch.cuda.get_device_name(0), "capability": f"{props.major}.{props.minor}",
           "memory_mib": props.total_memory // 2**20, "count": torch.cuda.device_count(), "driver": driver,
           "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "precision_auto": precision, "precision_reason": why}
    check.fig["gpu"] = fig
    print("\n".join(f"{k}: {v}" for k, v in fig.items()), flush=True)
    return fig


def step_tests(check) -> dict:
    xml = check.out / "pytest.xml"
    rc, _ = run_child(PYTEST, ["-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *test_selection()], timeout=300)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    if xml.is_file():
        for suite in ET.parse(xml).getroot().iter("testsuite"):
            for k in counts:
                counts[k] += int(suite.get(k, 0))
            failed += [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                       if c.find("failure") is not None or c.find("error") is not None]
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    check.fig["tests"].update(run=counts, failed=failed, exit=rc)
    if rc != 0:
        raise CheckFailed(f"pytest exited {rc}: {counts['failures']} failed, {counts['errors']} errors"
                          + (f" (first: {failed[0]})" if failed else ""))
    return counts


def step_medium(check, cfg, data, precision: str, tokens: int) -> dict:
    hp = {**cfg["train"], "epochs": 1, "precision": precision, "max_train_tokens": tokens}
    fig = train(check, data["full"], f"medium-{precision}", cfg["key"], hp, precision)
    check.fig.setdefault("medium", {})[precision] = fig
    if not fig["valid_ppl"] < check.fig["data"]["vocab_size"]:
        raise CheckFailed(f"valid PPL {fig['valid_ppl']} after an epoch: no better than guessing")
    return fig


def step_archs(check, cfg, data) -> list:
    from lmgrid.run.key import normalise

    cell, rows, failed = cfg["key"], [], []
    for arch, impl, out, precision in arch_runs():
        hp = {**cfg["train"], "epochs": 1, "precision": precision, "output_layer": out,
              "max_train_tokens": check.args.arch_tokens, "log_every": 0,
              "per_arch": {**OUTSIDE_PRESET, **(cfg["train"].get("per_arch") or {})}}
        if arch == "transformer":  # the model width must split into heads
            hp["heads"] = next(h for h in (10, 8, 5, 4, 2, 1) if hp.get("hidden_dim", 64) % h == 0)
        regime = "window" if arch == "ffnn" else cell.regime  # ffnn has no stream regime
        key = normalise(arch, impl, 5, cell.layers, regime, cell.seed)
        try:
            rows.append({"arch": arch, "impl": impl, "output_layer": out,
                         **train(check, data["small"], f"{arch}-{impl}-{out}-{precision}", key, hp, precision)})
        except Exception as e:  # noqa: BLE001 - every combination is tried; the step fails at the end
            failed.append(f"{arch}/{impl} {out} {precision}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            print("FAILED " + failed[-1], flush=True)
    check.fig["archs"] = rows
    for r in rows:
        print(f"{r['arch']:>11}/{r['impl']:<11} {r['output_layer']:>8} {r['precision']:>10}: "
              f"train {r['train_tokens_per_s']:>8} tok/s, eval {r['eval_tokens_per_s']:>8} tok/s, "
              f"peak {r['peak_mib']:>6} MiB", flush=True)
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(rows) + len(failed)} runs failed; first: {failed[0]}")
    return rows


def spawn(check, name: str, kwargs: dict, kill_at_epoch: int | None = None) -> tuple[int, str, dict | None]:
    spec, result = check.work / f"{name}.spec.json", check.work / f"{name}.result.json"
    result.unlink(missing_ok=True)
    spec.write_text(json.dumps({"kwargs": kwargs, "kill_at_epoch": kill_at_epoch, "result": str(result)}))
    rc, text = run_child(CHILD, [str(spec)], timeout=300)
    return rc, text, json.loads(result.read_text()) if result.is_file() else None


def child(spec_path: str) -> int:
    """A training run in its own process; with kill_at_epoch it SIGKILLs itself when that epoch (from 0) starts,
    i.e. after the previous epoch's checkpoint, as a killed job dies (tests/test_neural_support.killed_at_epoch)."""
    spec = json.loads(Path(spec_path).read_text())
    from lmgrid.neural import train as train_mod

    if spec["kill_at_epoch"] is not None:
        original = train_mod.Progress.on_train_epoch_start

        def kill(self, trainer, pl_module):
            if trainer.current_epoch == spec["kill_at_epoch"]:
                print(f"gpu-check: SIGKILL at the start of epoch {trainer.current_epoch + 1}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            original(self, trainer, pl_module)

        train_mod.Progress.on_train_epoch_start = kill
    from lmgrid.run.spec import hand_spec

    metrics = train_mod.run(hand_spec(**spec["kwargs"]))
    Path(spec["result"]).write_text(json.dumps(metrics, default=str))
    return 0


def resume_kwargs(check, cfg, data) -> dict:
    key, w = cfg["key"], check.work
    return {"arch": key.arch, "impl": key.impl, "n_step": key.n_step, "layers": key.layers, "regime": key.regime,
            "seed": key.seed, "paths": data["full"]["paths"], "vocab_path": data["full"]["vocab"],
            "run_dir": str(w / "runs" / "resume"), "ckpt_dir": str(w / "ckpt" / "resume"),
            "hp": {**cfg["train"], "epochs": 2, "max_train_tokens": check.args.short_tokens},
            "placement": f"cuda {check.fig.get('gpu', {}).get('precision_auto', 'auto')}"}


def step_resume(check, cfg, data) -> dict:
    kwargs = resume_kwargs(check, cfg, data)
    straight_kwargs = {**kwargs, "run_dir": kwargs["run_dir"] + "-straight", "ckpt_dir": kwargs["ckpt_dir"] + "-s"}
    _, _, straight = spawn(check, "straight", straight_kwargs)
    rc, _, _ = spawn(check, "killed", kwargs, kill_at_epoch=1)
    ckpt = Path(kwargs["ckpt_dir"])
    if rc != -signal.SIGKILL or not (ckpt / "last.ckpt").is_file():
        raise CheckFailed(f"the killed run exited {rc} (expected -9) with last.ckpt {(ckpt / 'last.ckpt').is_file()}")
    keep = check.work / "ckpt-gpu"  # for the identity step: the GPU checkpoint as the kill left it
    keep.mkdir()
    for f in ("fingerprint.txt", "last.ckpt"):
        shutil.copy2(ckpt / f, keep / f)
    rc, text, resumed = spawn(check, "resumed", kwargs)
    if straight is None or resumed is None or rc != 0:
        raise CheckFailed(f"a resume run failed (uninterrupted: {straight is not None}, resumed: exit {rc})")
    a, b = straight["valid_ppl_history"], resumed["valid_ppl_history"]
    rel = [abs(x - y) / x for x, y in zip(a, b)]
    fig = {"uninterrupted": a, "resumed": b, "resumed_from_checkpoint": "resuming from" in text,
           "epoch1_rel_diff": rel[0], "epoch2_rel_diff": rel[1], "bit_equal": a == b, "tolerance": RESUME_TOL}
    check.fig["resume"] = fig
    print(json.dumps(fig), flush=True)
    if not fig["resumed_from_checkpoint"] or len(a) != 2 or len(b) != 2 or rel[1] > RESUME_TOL:
        raise CheckFailed(f"resume: epoch 2 valid PPL {b[1:]} against {a[1:]} uninterrupted "
                          f"(relative {rel[1:]}, tolerance {RESUME_TOL}; resumed: {fig['resumed_from_checkpoint']})")
    return fig


def ask_server(check, cuda: bool) -> tuple[int | None, str]:
    """A warm server (CUDA initialised in it or not) asked to run one job: run_via_server's answer, its log."""
    from lmgrid.orchestration import warm

    sock, log = check.work / f"warm-{cuda}.sock", check.work / f"warm-{cuda}.log"
    with log.open("w") as fh:
        server = subprocess.Popen([sys.executable, "-c", BLOCK + SERVER, str(sock), str(os.getpid())], cwd=REPO,
                                  stdout=fh, stderr=subprocess.STDOUT,
                                  env={**os.environ, "GPU_CHECK_INIT_CUDA": "1" if cuda else "0"})
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        deadline = time.time() + 120
        while not sock.exists() and server.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        os.environ[warm.SOCKET_ENV] = str(sock)
        answer = warm.run_via_server(["gpu-check-job"])
    finally:
        os.environ.pop(warm.SOCKET_ENV, None)
        for s, h in handlers.items():  # run_via_server's handlers, for a forked job, are not the check's
            signal.signal(s, h)
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    print("".join(f"  | {line}\n" for line in text.splitlines()), end="", flush=True)
    return answer, text


def step_warm(check) -> dict:
    answer, log = ask_server(check, cuda=True)
    control, control_log = ask_server(check, cuda=False)
    fig = {"cuda_server_answer": answer, "refused": "refused (CUDA is initialised here)" in log,
           "control_forked": control == 0 and "job " in control_log}
    check.fig["warm"] = fig
    if answer is not None or not fig["refused"] or not fig["control_forked"]:
        raise CheckFailed(f"warm server: {fig} (expected: refused with CUDA, forked without)")
    return fig


def rebuilt_fingerprint(kwargs: dict, device: str, precision: str) -> str:
    """The checkpoint fingerprint train._run computes for the run of these hand_spec kwargs on `device` in
    `precision`: rebuilt from the same spec, so the identity step follows train._run when its signature changes
    (tests/test_gpu_check.py compares the two on a CPU run)."""
    from lmgrid.neural import train as train_mod
    from lmgrid.run.spec import hand_spec

    return train_mod._fingerprint(hand_spec(**kwargs), {"device": device, "precision": precision})


def step_identity(check, cfg, data) -> dict:
    from lmgrid.neural import train as train_mod
    from lmgrid.neural.placement import plan as place, visible_gpus
    from lmgrid.neural.precision import resolve_precision
    from lmgrid.run.settings import resolve_hparams

    hp = cfg["hp"]
    here = place(hp["accelerator"], hp["precision"], cluster=False, gpus=visible_gpus())
    cpu = place(hp["accelerator"], hp["precision"], cluster=False, gpus=0)
    fig = {"param_here": "placement={} {}".format(*here), "param_cpu": "placement={} {}".format(*cpu)}
    check.fig["identity"] = fig
    if here[0] != "cuda" or here == cpu:
        raise CheckFailed(f"placement: {fig['param_here']} here, {fig['param_cpu']} on a CPU: not told apart")
    kwargs, keep = resume_kwargs(check, cfg, data), check.work / "ckpt-gpu"
    if not (keep / "last.ckpt").is_file():
        raise CheckFailed("no GPU checkpoint to offer the CPU (the resume step failed before the kill)")

    def fingerprint(device, precision):
        return rebuilt_fingerprint(kwargs, device, precision)

    if fingerprint("cuda", here[1]) != (keep / "fingerprint.txt").read_text().strip():
        raise CheckFailed("the fingerprint rebuilt here is not the GPU run's: this step no longer mirrors train._run")
    cpu_precision = resolve_precision(resolve_hparams(kwargs["hp"], cfg["key"].arch)["precision"], cuda=False)[0]
    fig["cpu_resumes_gpu_checkpoint"] = train_mod._prepare_ckpt_dir(keep, fingerprint("cpu", cpu_precision)) is not None
    if fig["cpu_resumes_gpu_checkpoint"]:
        raise CheckFailed("a checkpoint trained on the GPU would be resumed on the CPU")
    return fig


def run_gpu_steps(check, cfg, data) -> None:
    steps = {"gpu": (step_gpu,), "tests": (step_tests,),
             "medium-bf16": (step_medium, cfg, data, "bf16-mixed", check.args.max_train_tokens),
             "medium-fp32": (step_medium, cfg, data, "32-true", check.args.short_tokens),
             "archs": (step_archs, cfg, data), "resume": (step_resume, cfg, data), "warm": (step_warm,),
             "identity": (step_identity, cfg, data)}
    for name, _ in STEPS:
        if name not in check.args.steps:
            continue
        if time.time() - check.t0 > check.args.budget_s:
            check.fig["failures"].append({"step": name, "error": f"not started: past --budget-s {check.args.budget_s}"})
            continue
        fn, *a = steps[name]
        check.step(name, fn, *a)
