"""Training jobs forked from a warm server (lmgrid.warm) behave like jobs run in their own process."""
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


def test_a_failing_job_exits_with_its_one_line_error(server, tmp_path):
    sock, _ = server
    corpus = tiny_corpus(tmp_path)
    cmd = train_cmd(corpus, tmp_path)
    cmd[cmd.index("--arch") + 1] = "nope"
    done = subprocess.run(cmd, env=env(LMGRID_WARM_SOCKET=str(sock)), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == ("lmgrid: error: arch: unknown neural architecture 'nope' "
                                   "(one of: ffnn, rnn, lstm, gru, transformer)")


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
