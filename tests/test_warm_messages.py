"""The warm server and its clients say when a job will not run in the server (lmgrid.orchestration.warm): the server
logs its exit for idleness, and a client that finds no server says so before it runs the job in its own process."""
from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from lmgrid.orchestration import warm

IDLE_LINE = "lmgrid warm-server: no job for"


def _serve(sock_path: str, parent_pid: int, idle_s: float) -> None:
    """warm.serve in this process, its SIGTERM handler put back after."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        warm.serve(sock_path, parent_pid, idle_s, run=lambda argv: 0)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_server_logs_its_exit_for_idleness(tmp_path, capsys):
    """A server that saw no job for idle_s logs one line saying so and why later jobs run on their own; a server that
    ends because its workflow is gone does not claim idleness (the control that the check can fail).

    Kills: the server exiting for idleness silently (the print removed: run by hand, this test failed)."""
    sock = tmp_path / "s.sock"
    _serve(str(sock), os.getpid(), idle_s=0.2)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(IDLE_LINE)]
    assert lines == [f"{IDLE_LINE} 0.2 s; exiting (later jobs run in their own processes)"]
    assert not sock.exists()

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid with no process: the workflow ended without stopping the server
    _serve(str(sock), gone.pid, idle_s=10.0)
    assert IDLE_LINE not in capsys.readouterr().out


def _stale_socket(path) -> None:
    """A socket file nobody listens on (a server killed with SIGKILL leaves one)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


@pytest.mark.parametrize("kind", ["missing", "stale"])
def test_client_without_a_server_says_it_runs_the_job_itself(tmp_path, monkeypatch, capsys, kind):
    """A job told to use a warm server (LMGRID_WARM_SOCKET) that finds none there prints one line to stderr naming
    the socket path, then runs in its own process (run_via_server: None); a job told of no server prints nothing.

    Kills: the silent fallback (the else branch removed: run by hand, this test failed on both kinds)."""
    path = tmp_path / "s.sock"
    if kind == "stale":
        _stale_socket(path)
    monkeypatch.setenv(warm.SOCKET_ENV, str(path))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert warm.run_via_server(["train"]) is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"no warm training server at {path}" in err[0] and "its own process" in err[0], err

    monkeypatch.delenv(warm.SOCKET_ENV)  # a cluster node or a plain shell: no server asked for, nothing to say
    assert warm.run_via_server(["train"]) is None
    assert capsys.readouterr().err == ""
