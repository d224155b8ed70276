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
the job exits with.  Killing the job kills the child.  Where no server answers (a cluster node, a plain shell),
`lmgrid train` runs in its own process as before.  The forked child's CPU time and peak memory are not in the
job's Snakemake benchmark file (the child is the server's, not the job's); metrics.json records them.
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

SOCKET_ENV = "LMGRID_WARM_SOCKET"
_STATUS = struct.Struct("!i")
_CHILDREN: set[int] = set()  # jobs running in children of this server


def _recv_all(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def run_via_server(argv: list[str]) -> int | None:
    """Run `lmgrid <argv>` in a child of the warm server; its exit status, or None when no server answers."""
    path = os.environ.get(SOCKET_ENV)
    if not path or "LOCAL_RANK" in os.environ:  # DDP processes that Lightning starts run on their own
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    sys.stdout.flush()
    sys.stderr.flush()
    socket.send_fds(conn, [struct.pack("!I", len(request))], [0, 1, 2])
    conn.sendall(request)

    def stop(signum, frame):  # the job is being killed: so is its child
        try:
            conn.sendall(b"K")
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return _STATUS.unpack(_recv_all(conn, _STATUS.size))[0]
    except ConnectionError:
        print("lmgrid: error: the warm training server went away during the job", file=sys.stderr)
        return 1
    finally:
        conn.close()


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the job's process, then run its command."""
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
        from .cli import main

        status = main(request["argv"])
    except SystemExit as e:  # argparse errors
        status = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - a crash is reported as Python would, then the child ends
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _serve_one(conn: socket.socket) -> None:
    msg, fds, _, _ = socket.recv_fds(conn, 4, 3)
    request = json.loads(_recv_all(conn, struct.unpack("!I", msg)[0]))
    pid = os.fork()
    if pid == 0:
        _child(request, fds)
    _CHILDREN.add(pid)
    print(f"job {pid}: lmgrid {' '.join(request['argv'])}", flush=True)
    for fd in fds:
        os.close(fd)

    def watch() -> None:  # the job asked to stop ("K") or died: stop its child
        try:
            while conn.recv(1):
                os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def reap() -> None:
        _, status = os.waitpid(pid, 0)
        _CHILDREN.discard(pid)
        try:
            conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status) % 256))
        except OSError:
            pass
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    threading.Thread(target=watch, daemon=True).start()
    threading.Thread(target=reap, daemon=True).start()


def serve(path: str, parent_pid: int, idle_s: float = 600.0) -> None:
    """Import the training stack, then fork one child per request until `parent_pid` (the workflow) is gone."""
    import lmgrid.neural.train  # noqa: F401 - the point: paid once, inherited by every child

    def shutdown(signum, frame):  # the workflow stops us: no job may outlive the server
        for pid in list(_CHILDREN):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, shutdown)

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    server.bind(path)
    server.listen(16)
    idle = 0.0
    try:
        while idle < idle_s:
            ready, _, _ = select.select([server], [], [], 5.0)
            if not ready:
                idle += 5.0
                try:
                    os.kill(parent_pid, 0)
                except ProcessLookupError:
                    return  # the workflow ended without stopping us
                continue
            idle = 0.0
            conn, _ = server.accept()
            try:
                _serve_one(conn)
            except (OSError, ValueError, ConnectionError) as e:
                print(f"lmgrid warm-server: a request failed: {e}", file=sys.stderr, flush=True)
                conn.close()
    finally:
        server.close()
        if os.path.exists(path):
            os.unlink(path)
