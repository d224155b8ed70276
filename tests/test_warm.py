"""Training jobs forked from a warm server (lmgrid.orchestration.warm) behave like jobs run in their own process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_neural_support import tiny_corpus

SRC = str(Path(__file__).parents[1] / "src")


def env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]), **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    sock, log = root / "s.sock", root / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lmgrid", "warm-server", "--socket", str(sock),
                                 "--parent-pid", str(os.getpid()), "--idle-s", "300"], stdout=out,
                                stderr=subprocess.STDOUT, env=env())
    for _ in range(240):
        if sock.exists():
            break
        time.sleep(0.5)
    assert sock.exists(), log.read_text()
    yield sock, log
    proc.terminate()
    proc.wait(timeout=30)
    assert not sock.exists()  # cleaned up


def train_cmd(corpus, out: Path, **hp) -> list[str]:
    p = corpus["paths"]
    return [sys.executable, "-m", "lmgrid", "train", "--arch", "lstm", "--n-step", "3", "--train", p["train"],
            "--valid", p["valid"], "--test", p["test"], "--vocab", corpus["vocab_path"], "--run-dir",
            str(out / "run"), "--ckpt-dir", str(out / "ckpt"), "--threads", "1",
            "--hparams", json.dumps({"epochs": 2, "emb_dim": 16, "hidden_dim": 16, "log_every": 0, **hp})]


def test_a_forked_job_writes_what_its_own_process_writes(server, tmp_path):
    sock, log = server
    corpus = tiny_corpus(tmp_path)
    own = subprocess.run(train_cmd(corpus, tmp_path / "own"), env=env(), capture_output=True, text=True)
    with (tmp_path / "job.log").open("w") as out:
        warm = subprocess.run(train_cmd(corpus, tmp_path / "warm"), env=env(LMGRID_WARM_SOCKET=str(sock)),
                              stdout=out, stderr=subprocess.STDOUT, text=True)
    assert own.returncode == 0 and warm.returncode == 0, own.stderr
    assert str(tmp_path / "warm" / "run") in log.read_text()  # the server ran it
    job_log = (tmp_path / "job.log").read_text()
    assert "valid PPL" in job_log  # the child wrote to the job's own stdout
    a, b = (json.loads((tmp_path / d / "run" / "metrics.json").read_text()) for d in ("own", "warm"))
    assert a["test"] == b["test"] and a["valid"] == b["valid"]  # deterministic: the same numbers
    assert all(m["cpu_s"] > 0 and m["max_rss_mib"] > 0 for m in (a, b))  # each process measured itself


def test_a_failing_job_exits_with_its_one_line_error(server, tmp_path):
    sock, _ = server
    corpus = tiny_corpus(tmp_path)
    cmd = train_cmd(corpus, tmp_path)
    cmd[cmd.index("--arch") + 1] = "nope"
    done = subprocess.run(cmd, env=env(LMGRID_WARM_SOCKET=str(sock)), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == ("lmgrid: error: arch: unknown neural architecture 'nope' "
                                   "(one of: ffnn, rnn, lstm, gru, transformer; or a plug-in: docs/models.md)")


def test_killing_the_job_kills_its_child(server, tmp_path):
    sock, log = server
    corpus = tiny_corpus(tmp_path, train=3000)
    job_log = tmp_path / "job.log"
    with job_log.open("w") as out:
        job = subprocess.Popen(train_cmd(corpus, tmp_path, epochs=200), env=env(LMGRID_WARM_SOCKET=str(sock)),
                               stdout=out, stderr=subprocess.STDOUT)
    for _ in range(120):
        if "epoch 1/200" in job_log.read_text():
            break
        time.sleep(0.5)
    child = int(next(line for line in log.read_text().splitlines() if str(tmp_path) in line).split()[1][:-1])
    os.kill(child, 0)  # training in the server's child
    job.send_signal(signal.SIGTERM)
    job.wait(timeout=60)
    for _ in range(120):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"child {child} still runs after its job was killed")
    assert job.returncode != 0


def test_without_a_server_the_job_runs_in_its_own_process(tmp_path):
    corpus = tiny_corpus(tmp_path)
    done = subprocess.run(train_cmd(corpus, tmp_path), env=env(LMGRID_WARM_SOCKET=str(tmp_path / "none.sock")),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "metrics.json").is_file()


ALLOC_MIB, CPU_S = 200, 0.5
# A job of known cost, run as the warm server runs a training job (its `run`), or in a process of its own: it
# allocates ALLOC_MIB and touches every page, spends CPU_S of CPU time, then writes what lmgrid.common.resources.own_usage
# measured (what lmgrid train and lmgrid ngram write into metrics.json) and its RSS before the allocation.
KNOWN_JOB = f"""
import json, os, sys, time
def job(argv):
    from lmgrid.common.resources import own_usage
    with open("/proc/self/statm") as fh:
        rss_before_mib = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    block = bytearray({ALLOC_MIB} * 2 ** 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    start = time.process_time()
    while time.process_time() - start < {CPU_S}:
        pass
    with open(argv[1], "w") as fh:
        json.dump({{"rss_before_mib": rss_before_mib, **own_usage()}}, fh)
    return 0
"""


def _run_measured(cmd: list[str], **kw) -> tuple[int, float, float]:
    """Exit status, peak RSS (MiB) and CPU seconds of a process as its parent sees them (wait4): what Snakemake's
    benchmark of a job measures."""
    proc = subprocess.Popen(cmd, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="needs Linux /proc")
def test_resource_figures_are_the_training_process_own_with_and_without_the_server(tmp_path):
    """A job that allocates 200 MiB and spends 0.5 s of CPU reports at least that (peak RSS above its RSS before
    the allocation by 200 MiB, CPU time >= 0.5 s) through lmgrid.common.resources, whether the warm server forked it or it
    ran in its own process.  Negative control, the mutation it kills: taking the figures from the job's own process
    as Snakemake's benchmark does, which under the server is the thin client (measured here by wait4 as Snakemake
    would): it misses the allocation and the CPU time."""
    sock, log = tmp_path / "s.sock", tmp_path / "server.log"
    server_code = KNOWN_JOB + "from lmgrid.orchestration.warm import serve\nserve(sys.argv[1], int(sys.argv[2]), 300.0, run=job)\n"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-c", server_code, str(sock), str(os.getpid())], stdout=out,
                                  stderr=subprocess.STDOUT, env=env(), start_new_session=True)
    try:
        assert wait_for(sock.exists), log.read_text()
        client = "import sys\nfrom lmgrid.orchestration.warm import run_via_server\nsys.exit(run_via_server(sys.argv[1:]) or 0)\n"
        status, client_rss, client_cpu = _run_measured(
            [sys.executable, "-c", client, "job", str(tmp_path / "warm.json")], env=env(LMGRID_WARM_SOCKET=str(sock)))
        assert status == 0 and "job " in log.read_text()  # the server forked it
    finally:
        server.terminate()
        server.wait(timeout=30)
    own = subprocess.run([sys.executable, "-c", KNOWN_JOB + "sys.exit(job(sys.argv[1:]))\n", "job",
                          str(tmp_path / "own.json")], env=env(), capture_output=True, text=True)
    assert own.returncode == 0, own.stderr

    def reports_the_job(rss_mib: float, cpu_s: float, rss_before_mib: float) -> bool:
        return rss_mib >= rss_before_mib + 0.95 * ALLOC_MIB and cpu_s >= CPU_S

    for name in ("warm", "own"):
        r = json.loads((tmp_path / f"{name}.json").read_text())
        assert reports_the_job(r["max_rss_mib"], r["cpu_s"], r["rss_before_mib"]), (name, r)
    # The mutant: the thin client's own figures for the job the server ran miss it, even against a zero baseline.
    assert not reports_the_job(client_rss, client_cpu, rss_before_mib=0.0), (client_rss, client_cpu)


def start_server(root: Path) -> tuple[subprocess.Popen, Path, Path]:
    """A server of its own, in its own session as the Snakefile starts it (its session id is its pid)."""
    sock, log = root / "s.sock", root / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lmgrid", "warm-server", "--socket", str(sock),
                                 "--parent-pid", str(os.getpid())], stdout=out, stderr=subprocess.STDOUT, env=env(),
                                start_new_session=True)
    for _ in range(240):
        if sock.exists():
            return proc, sock, log
        time.sleep(0.5)
    pytest.fail(log.read_text())


def wait_for(what, timeout: float = 120.0, step: float = 0.25):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = what()
        if value:
            return value
        time.sleep(step)
    return what()


def children(log: Path) -> list[int]:
    return [int(line.split()[1][:-1]) for line in log.read_text().splitlines() if line.startswith("job ")]


def listening_inode(sock: Path) -> str:
    """The inode of the socket listening at `sock` (/proc/net/unix: Num RefCount Protocol Flags Type St Inode Path)."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) == 8 and f[7] == str(sock) and int(f[3], 16) & 0x10000:  # __SO_ACCEPTCON: it listens
            return f[6]
    raise AssertionError(f"nothing listens at {sock}")


def socket_fds(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            out.add(os.readlink(fd))
        except OSError:
            pass
    return out


def connected(pid: int) -> bool:
    """Whether process `pid` holds a connected Unix socket (/proc/net/unix St 03)."""
    inodes = {link[8:-1] for link in socket_fds(pid) if link.startswith("socket:[")}
    rows = [line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
    return any(f[6] in inodes and f[5] == "03" for f in rows)


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (field 6 of /proc/<pid>/stat), zombies left out."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@pytest.mark.skipif(not Path("/proc/net/unix").is_file(), reason="needs Linux /proc")
def test_a_server_killed_mid_run_loses_nothing_and_leaves_nothing_running(tmp_path):
    """`kill -9` of the server while two jobs train and a third waits to be accepted: the two fail with one line,
    the third runs in its own process, no process of the server's is left, a job started after it runs in its own
    process, and the rerun of a failed job ends with the numbers of an uninterrupted run.

    kills: child keeps the listening socket (checked in /proc, and a later job's connect would hang);
    child outlives its server (no PR_SET_PDEATHSIG: /proc shows it); a job the server never started fails
    instead of running in its own process; an in-flight job's failure is a traceback or silent."""
    proc, sock, log = start_server(tmp_path)
    corpus = tiny_corpus(tmp_path, train=3000)
    jobs = {}
    for name in ("a", "b"):
        with (tmp_path / f"{name}.log").open("w") as out:
            jobs[name] = subprocess.Popen(train_cmd(corpus, tmp_path / name, epochs=10),
                                          env=env(LMGRID_WARM_SOCKET=str(sock)), stdout=out, stderr=subprocess.STDOUT)
    assert wait_for(lambda: all("epoch 1/10" in (tmp_path / f"{n}.log").read_text() for n in jobs)), \
        log.read_text() + (tmp_path / "a.log").read_text()
    kids = children(log)
    assert len(kids) == 2
    listening = f"socket:[{listening_inode(sock)}]"
    assert listening in socket_fds(proc.pid)  # the check sees the server's own copy
    for kid in kids:
        assert listening not in socket_fds(kid), f"child {kid} holds the listening socket"
    proc.send_signal(signal.SIGSTOP)  # the server accepts nothing more: the next job waits in its backlog
    with (tmp_path / "c.log").open("w") as out:  # the same run as a, never interrupted
        jobs["c"] = subprocess.Popen(train_cmd(corpus, tmp_path / "c", epochs=10),
                                     env=env(LMGRID_WARM_SOCKET=str(sock)), stdout=out, stderr=subprocess.STDOUT)
    assert wait_for(lambda: connected(jobs["c"].pid), timeout=30, step=0.05), "job c never reached the server"
    proc.kill()
    proc.wait(timeout=30)
    for name in ("a", "b"):
        jobs[name].wait(timeout=60)
        text = (tmp_path / f"{name}.log").read_text()
        assert jobs[name].returncode == 1, text
        assert [line for line in text.splitlines() if "error" in line.lower() or "Traceback" in line] == [
            "lmgrid: error: the warm training server went away during the job; run it again to resume"], text
    # at once: a child that outlived its server would otherwise train on for seconds
    left = wait_for(lambda: not session_members(proc.pid), timeout=3, step=0.05) or session_members(proc.pid)
    assert left is True, f"processes of the killed server left: {left}"
    assert jobs["c"].wait(timeout=300) == 0, (tmp_path / "c.log").read_text()
    assert len(children(log)) == 2  # c ran in its own process, after the server it had reached went away
    assert "went away before it started this job; running it here" in (tmp_path / "c.log").read_text()
    rerun = subprocess.run(train_cmd(corpus, tmp_path / "a", epochs=10), env=env(LMGRID_WARM_SOCKET=str(sock)),
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming from" in rerun.stdout + rerun.stderr
    a, c = (json.loads((tmp_path / d / "run" / "metrics.json").read_text()) for d in ("a", "c"))
    assert a["test"] == c["test"] and a["valid"] == c["valid"]


# Test-only, in the server's process alone (FAKE_CUDA_INITIALISED is in its environment, not the jobs'): torch
# reports CUDA as initialised, as it would after an import that touched CUDA.  GUARD_REMOVED also takes the
# server's check out (the negative control).
CUDA_IN_SERVER = '''
import os
if os.environ.get("FAKE_CUDA_INITIALISED") == "1":
    import torch
    torch.cuda.is_initialized = lambda: True
    if os.environ.get("GUARD_REMOVED") == "1":
        import lmgrid.orchestration.warm
        lmgrid.orchestration.warm.cuda_initialized = lambda: False
'''


def served_with_cuda_initialised(root: Path, corpus, guard_removed: bool) -> tuple[subprocess.CompletedProcess, str]:
    inject = root / "inject"
    inject.mkdir(parents=True)
    (inject / "sitecustomize.py").write_text(CUDA_IN_SERVER)
    sock, log = root / "s.sock", root / "server.log"
    server_env = {**env(FAKE_CUDA_INITIALISED="1", GUARD_REMOVED="1" if guard_removed else "0"),
                  "PYTHONPATH": os.pathsep.join([str(inject), SRC, os.environ.get("PYTHONPATH", "")])}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lmgrid", "warm-server", "--socket", str(sock),
                                 "--parent-pid", str(os.getpid()), "--idle-s", "120"], stdout=out,
                                stderr=subprocess.STDOUT, env=server_env)
    try:
        assert wait_for(sock.exists, timeout=120), log.read_text()
        done = subprocess.run(train_cmd(corpus, root), env=env(LMGRID_WARM_SOCKET=str(sock)), capture_output=True,
                              text=True, timeout=300)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return done, log.read_text()


def test_a_server_with_cuda_initialised_forks_nothing(tmp_path):
    """A process that initialised CUDA cannot fork a child that uses it: the server refuses, and the job runs in its
    own process with one line saying so.  Kills: the server forking regardless (the negative control: with its
    cuda_initialized check patched out, the job is forked, as the server's log shows)."""
    corpus = tiny_corpus(tmp_path)
    done, log = served_with_cuda_initialised(tmp_path / "guarded", corpus, guard_removed=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "guarded" / "run" / "metrics.json").is_file()
    assert "has CUDA initialised and cannot fork; running this job in its own process" in done.stderr
    assert "refused (CUDA is initialised here)" in log and not children_in(log), log

    done, log = served_with_cuda_initialised(tmp_path / "unguarded", corpus, guard_removed=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert children_in(log) and "cannot fork" not in done.stderr, log


def children_in(log_text: str) -> list[str]:
    return [line for line in log_text.splitlines() if line.startswith("job ")]


# A server whose import of the training stack waits for a file: the window in which the workflow's first training
# jobs start, made as long as the test needs.
GATED_SERVER = """
import importlib.abc, os, sys, time
class Gate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        while name == "lmgrid.neural.train" and not os.path.exists(sys.argv[3]):
            time.sleep(0.05)
        return None
sys.meta_path.insert(0, Gate())
def job(argv):
    open(argv[1], "w").write("ran")
    return 0
from lmgrid.orchestration.warm import serve
serve(sys.argv[1], int(sys.argv[2]), 300.0, run=job)
"""


def test_a_job_that_starts_while_the_server_imports_waits_for_it(tmp_path):
    """The server listens before it imports torch and Lightning, so a training job that starts meanwhile (the
    default run's first ones do, its data jobs taking a fraction of a second) is forked by it once the import is
    done, instead of finding no server and importing them itself (~6 CPU-s).  Kills: importing the training stack
    before binding the socket (the socket does not appear while the import waits; seen failing)."""
    sock, log, release = tmp_path / "s.sock", tmp_path / "server.log", tmp_path / "release"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-c", GATED_SERVER, str(sock), str(os.getpid()), str(release)],
                                  stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True)
    try:
        assert wait_for(sock.exists, timeout=60), log.read_text()  # listening, the import still held
        client = ("import sys\nfrom lmgrid.orchestration.warm import run_via_server\n"
                  "status = run_via_server(sys.argv[1:])\nsys.exit(3 if status is None else status)\n")
        job = subprocess.Popen([sys.executable, "-c", client, "job", str(tmp_path / "out.txt")],
                               env=env(LMGRID_WARM_SOCKET=str(sock)))
        time.sleep(1.0)
        assert job.poll() is None and not (tmp_path / "out.txt").exists()  # it waits for the server
        release.touch()
        assert job.wait(timeout=60) == 0, log.read_text()  # 3: it ran in its own process
        assert (tmp_path / "out.txt").read_text() == "ran" and "job " in log.read_text()
    finally:
        server.terminate()
        server.wait(timeout=30)
