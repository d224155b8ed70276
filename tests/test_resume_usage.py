"""A resumed run's metrics.json counts the training time of every attempt (lmgrid.neural.callbacks.AttemptUsage).

Each attempt runs in a child forked from the test process, as a job forked from the warm server does
(lmgrid.orchestration.warm): its CPU counters start at zero, so the test measures what each attempt really used
(getrusage of the reaped child) independently of what the run reports.  In one process, the second attempt's own
counters would hold the first's too, and no carried sum could be told from the process's."""
from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from pathlib import Path

import pytest
import torch

from lmgrid.neural import callbacks
from lmgrid.neural import train as train_mod
from lmgrid.run.record import RECORD_FILE

from test_neural_support import killed_at_epoch, tiny_corpus
from test_neural_train import spec_of

KILLED = 3  # a child's exit status: its run was killed as planned


def _in_child(spec, kill_at_epoch: int | None) -> float:
    """Run the spec's training in a forked child (killed when it starts `kill_at_epoch`, counted from 0); the CPU
    seconds the child used, measured by this process when it reaps the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            if kill_at_epoch is None:
                train_mod.run(spec, threads=1)
                status = 0
            else:
                with killed_at_epoch(kill_at_epoch):
                    train_mod.run(spec, threads=1)
                status = KILLED
        except BaseException:  # noqa: BLE001 - reported in the parent's assertion through the exit status
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert os.waitstatus_to_exitcode(wait_status) == (KILLED if kill_at_epoch is not None else 0)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _checkpoint_usage(path: Path) -> dict:
    """The AttemptUsage state stored in a checkpoint."""
    states = torch.load(path, map_location="cpu", weights_only=False)["callbacks"]
    (state,) = [v for k, v in states.items() if k.startswith("AttemptUsage")]
    return state


def attempt_checks(metrics: dict, first: dict, cpu_first_s: float, cpu_second_s: float) -> dict[str, bool]:
    """Whether metrics.json's figures hold the first attempt's recorded time as well as the second's, by figure."""
    wall_second_s = metrics["end_unix_s"] - metrics["start_unix_s"]  # the last attempt's, from the same clock reads
    return {
        "attempts": metrics["attempts"] == 2,
        # The whole second process (as its parent measured it) cannot account for the total: the first's CPU is in
        # it; and nothing is counted that did not run (0.002: the 3-decimal rounding of two figures).
        "cpu_s": (cpu_second_s < metrics["cpu_s"] <= cpu_first_s + cpu_second_s + 0.002
                  and metrics["cpu_s"] >= first["cpu_s"]),
        "wall_s": metrics["wall_s"] >= first["wall_s"] + wall_second_s - 0.002,
    }


@pytest.mark.parametrize("carried", [True, False])
def test_resumed_run_reports_the_training_time_of_both_attempts(tmp_path, monkeypatch, carried):
    """A run killed after epoch 1 and resumed reports CPU and wall seconds of at least the first attempt's recorded
    ones (stored in last.ckpt, up to that checkpoint) plus the second's, and no more CPU than both processes used.

    Kills: metrics.json reporting the last process's own cpu_s and wall_s only (the carry-over dropped: the
    checkpoint's AttemptUsage state not loaded), run here as the negative control (carried=False)."""
    if not carried:
        monkeypatch.setattr(callbacks.AttemptUsage, "load_state_dict", lambda self, state: None)
    corpus = tiny_corpus(tmp_path)
    spec = spec_of(corpus, tmp_path, epochs=3, plateau_patience=0, lr_decay=0.5)
    cpu_first_s = _in_child(spec, kill_at_epoch=1)
    first = _checkpoint_usage(Path(spec.ckpt_dir) / "last.ckpt")
    assert first["attempts"] == 1 and 0 < first["cpu_s"] <= cpu_first_s + 0.001 and first["wall_s"] > 0
    cpu_second_s = _in_child(spec, kill_at_epoch=None)
    metrics = json.loads((Path(spec.run_dir) / RECORD_FILE).read_text())
    assert metrics["epochs"] == 3
    checks = attempt_checks(metrics, first, cpu_first_s, cpu_second_s)
    # Carried: every figure holds both attempts.  Dropped: each figure alone tells (not only the count).
    assert checks == dict.fromkeys(checks, carried), (checks, metrics, first, cpu_first_s, cpu_second_s)
    if carried:
        assert metrics["max_rss_mib"] >= first["max_rss_mib"]  # the higher of the two peaks

