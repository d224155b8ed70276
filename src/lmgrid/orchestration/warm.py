"""A warm start for training jobs: one process imports torch and Lightning once, and forks a child per job.

Why: importing torch, Lightning and what Lightning pulls in (torch._dynamo, torchmetrics with scipy.signal and
matplotlib) takes about 8.5 s on a 2-core machine, and in the default run that was a third of all training-job
time (docs/benchmarks.md, "Training start-up").  Lightning imports those at module level, so a training process
cannot skip them; instead the cost is paid once per workflow.

How: on a local run, the workflow starts `lmgrid warm-server` (Snakefile `onstart`) and exports its socket in
LMGRID_WARM_SOCKET.  Each training job is still its own Snakemake job, with its own command line, log, benchmark
file, checkpoint folder, resume and rerun semantics: its `lmgrid train` process connects to the server and hands
over its command line, working directory, environment and its stdin/stdout/stderr; the server forks a child that
runs exactly that command, in that directory, writing to those files, and reports its exit status back, which
the job exits with.  Killing the job kills the child.  Where no server is asked for (a cluster node, a plain shell),
`lmgrid train` runs in its own process as before; where LMGRID_WARM_SOCKET names a socket no server answers on (it
exited after `idle_s` without a job, logging one line, or was killed), the job says so in one line on stderr,
naming the socket, and runs in its own process.

A server fault loses nothing and leaves nothing running: a child holds no socket but its job's stdin/stdout/stderr
(so once the server is gone nothing listens, and the next job's connect fails and it runs in its own process),
and it dies with its server (Linux: PR_SET_PDEATHSIG) and with its job (the server kills the child's process
group when the job's connection ends).  A job whose server went away before it started the child falls back to
running in its own process; a job whose child was running fails with one line, and its rerun resumes from the
run's last checkpoint like any other failed job.  The forked child's CPU time and peak memory are not in the
job's Snakemake benchmark file (the child is the server's, not the job's): the child measures itself and writes them
into metrics.json (lmgrid.common.resources), as a job in its own process does.

GPUs: a process that has initialised CUDA cannot fork a child that uses it (torch: "Cannot re-initialize CUDA in
forked subprocess").  The workflow starts no server when a training job of the run will train on a GPU, and the
server forks nothing once CUDA is initialised in it (as a future import that touches CUDA would do): it answers
REFUSED instead, and the job runs in its own process, with one line saying so.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable

SOCKET_ENV = "LMGRID_WARM_SOCKET"
_PID = struct.Struct("!i")  # server -> job, first: the child's pid, once the child exists ("started")
_STATUS = struct.Struct("!i")  # server -> job, last: the child's exit status
REFUSED = -1  # sent instead of a pid: the server will not fork (CUDA is initialised in it); the job runs itself
_CHILDREN: set[int] = set()  # jobs running in children of this server (each its own process group)
_OPEN: set[socket.socket] = set()  # the listening socket and every job connection: no child keeps any of them
_PR_SET_PDEATHSIG = 1
GONE = "lmgrid: error: the warm training server went away during the job; run it again to resume"


def _recv_all(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def run_via_server(argv: list[str]) -> int | None:
    """Run `lmgrid <argv>` in a child of the warm server; its exit status, or None when no server started it."""
    path = os.environ.get(SOCKET_ENV)
    if not path or "LOCAL_RANK" in os.environ:  # DDP processes that Lightning starts run on their own
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connected = False
    try:
        conn.connect(path)
        connected = True
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        sys.stdout.flush()
        sys.stderr.flush()
        socket.send_fds(conn, [struct.pack("!I", len(request))], [0, 1, 2])
        conn.sendall(request)
        if _PID.unpack(_recv_all(conn, _PID.size))[0] == REFUSED:  # nothing ran: run it here
            conn.close()
            print("lmgrid: the warm training server has CUDA initialised and cannot fork; running this job in its "
                  "own process", file=sys.stderr, flush=True)
            return None
        # The server forked the child: from here on the job is its.
    except OSError as e:  # no server, or it went away before it started the child: nothing ran, run it here
        conn.close()
        if connected:
            print("lmgrid: the warm training server went away before it started this job; running it here",
                  file=sys.stderr, flush=True)
        else:  # the workflow asked for a server that is not there (it exited when idle, or was killed): say so
            print(f"lmgrid: no warm training server at {path} ({e.strerror or e}); running this job in its own "
                  "process", file=sys.stderr, flush=True)
        return None

    def stop(signum, frame):  # the job is being killed: so is its child
        try:
            conn.sendall(b"K")
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return _STATUS.unpack(_recv_all(conn, _STATUS.size))[0]
    except OSError:  # ConnectionError included
        print(GONE, file=sys.stderr, flush=True)
        return 1
    finally:
        conn.close()


def _die_with(server_pid: int) -> None:
    """In a fresh child: be killed when the server dies (Linux), and end now if it has died already."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the server's SIGTERM handler still stops its children
        pass
    if os.getppid() != server_pid:
        os._exit(1)


def _child(request: dict, fds: list[int], server_pid: int, run: Callable[[list[str]], int]) -> None:
    """In the forked child: hold nothing of the server's, become the job's process, then run its command."""
    _die_with(server_pid)
    os.setpgid(0, 0)  # its own process group: the server stops the child with whatever it started
    for sock in list(_OPEN):
        sock.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(SOCKET_ENV, None)  # the child runs the job itself
    sys.argv = ["lmgrid", *request["argv"]]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    status = 1
    try:
        status = run(request["argv"])
    except SystemExit as e:  # argparse errors
        status = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - a crash is reported as Python would, then the child ends
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _stop(pid: int, sig: int = signal.SIGTERM) -> None:
    """Signal a child's process group (the child and what it started), or the child alone before it has one."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, sig)
            return
        except (ProcessLookupError, PermissionError):
            continue


def cuda_initialized() -> bool:
    """Whether this process has initialised CUDA (torch's own criterion for a child that cannot use it)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _serve_one(conn: socket.socket, run: Callable[[list[str]], int]) -> None:
    msg, fds, _, _ = socket.recv_fds(conn, 4, 3)
    request = json.loads(_recv_all(conn, struct.unpack("!I", msg)[0]))
    if cuda_initialized():
        for fd in fds:
            os.close(fd)
        print(f"refused (CUDA is initialised here): lmgrid {' '.join(request['argv'])}", flush=True)
        conn.sendall(_PID.pack(REFUSED))
        _OPEN.discard(conn)
        conn.close()
        return
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(request, fds, server_pid, run)
    try:
        os.setpgid(pid, pid)  # also here, so that the group exists before the server may signal it
    except OSError:
        pass
    _CHILDREN.add(pid)
    print(f"job {pid}: lmgrid {' '.join(request['argv'])}", flush=True)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(_PID.pack(pid))  # the job learns that its child runs (before reap() may send the status)
    except OSError:
        pass  # the job is gone already: watch() stops the child

    def watch() -> None:  # the job asked to stop ("K") or died: stop its child
        try:
            while conn.recv(1):
                if pid in _CHILDREN:
                    _stop(pid)
        except OSError:
            pass
        if pid in _CHILDREN:
            _stop(pid)

    def reap() -> None:
        _, status = os.waitpid(pid, 0)
        _CHILDREN.discard(pid)
        try:
            conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status) % 256))
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _OPEN.discard(conn)
        conn.close()

    threading.Thread(target=watch, daemon=True).start()
    threading.Thread(target=reap, daemon=True).start()


def serve(path: str, parent_pid: int, idle_s: float = 600.0, run: Callable[[list[str]], int] | None = None) -> None:
    """Listen, import the training stack, then fork one child per request, which runs `run(argv)` (the `lmgrid`
    command line's main), until `parent_pid` (the workflow) is gone or no job ran for `idle_s` seconds."""
    import ctypes  # noqa: F401 - imported once here, used in every child (_die_with)

    if run is None:
        raise ValueError("serve: run (the command line's main) is required")

    def shutdown(signum, frame):  # the workflow stops us: no job may outlive the server
        for pid in list(_CHILDREN):
            _stop(pid)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, shutdown)

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    server.bind(path)
    server.listen(16)
    _OPEN.add(server)
    tick = min(5.0, idle_s)
    idle = 0.0
    try:
        # Listening before this import (seconds): a job that starts meanwhile waits in the backlog, idle, and is forked
        # once it is done, instead of finding no server and importing torch and Lightning itself.
        import lmgrid.neural.train  # noqa: F401 - the point: paid once, inherited by every child

        while idle < idle_s:
            ready, _, _ = select.select([server], [], [], tick)
            if not ready:
                idle = idle if _CHILDREN else idle + tick  # a running job is not idleness: it dies with us
                try:
                    os.kill(parent_pid, 0)
                except ProcessLookupError:
                    return  # the workflow ended without stopping us
                continue
            idle = 0.0
            conn, _ = server.accept()
            _OPEN.add(conn)
            try:
                _serve_one(conn, run)
            except (OSError, ValueError, ConnectionError) as e:
                print(f"lmgrid warm-server: a request failed: {e}", file=sys.stderr, flush=True)
                _OPEN.discard(conn)
                conn.close()
        # One line in the server's log: the jobs that start from now on find no server and run in their own processes.
        print(f"lmgrid warm-server: no job for {idle_s:g} s; exiting (later jobs run in their own processes)",
              flush=True)
    finally:
        server.close()
        if os.path.exists(path):
            os.unlink(path)
