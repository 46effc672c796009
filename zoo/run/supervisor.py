"""The supervisor of data-parallel worker processes started on this machine (``parallel_sync``'s ``zoo run``).

This process hosts the rendezvous store on a free loopback port (the OS picks it, so there is no race for a
port), starts ``world_size`` fresh Python worker processes (each loads plugins and ``import_names`` again, and
never re-runs the caller's script) and watches them. Each worker joins the gloo (CPU) or nccl (CUDA) process
group and runs the same training code as a serial run; rank 0 alone owns the run directory. (Under torchrun,
torchrun supervises: see ``zoo.run.launch``.)

Faults. A worker that raises reports one line (its exception) to the supervisor and exits; a worker that is
killed is seen through its exit code. The supervisor then lets the others stop (they fail at their next
collective, whose peer is gone), kills what is left after a few seconds, and raises ``WorkerError`` naming the
first worker that failed and why. Errors that only follow from a peer's death (a collective that lost its peer)
are not taken as the cause when another worker's own failure is known. Stop signals (Ctrl-C, SIGTERM, SIGHUP)
reaching the supervisor are forwarded to every worker as SIGTERM: the workers agree to stop after the current
iteration, rank 0 saves, and everything exits. Workers also get SIGTERM if the supervisor itself dies (Linux
``PR_SET_PDEATHSIG``), so no process is left behind.
"""

from __future__ import annotations

import datetime
import importlib
import logging
import multiprocessing.connection
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from easydict import EasyDict

from ..config import to_plain
from ..config.flags import debug
from ..errors import ZooError
from ..lifetime import die_with_parent, exit_cause, failure_line
from ..pipelines.signals import StopSignals
from ..plugins import load_run_plugins
from ..sizes import check_processes

# How long the supervisor lets the other workers exit on their own after one failed, before killing them.
_STOP_GRACE_S = 5.0
# Substrings of errors that only say a collective lost its peer (a consequence, not a cause).
_PEER_ERRORS = ("connection closed by peer", "connection reset", "broken pipe", "gloo", "nccl", "timed out",
                "socket", "disconnect")


log = logging.getLogger("zoo")


class WorkerError(ZooError):
    """A worker process failed (an exception or a kill); the run was stopped."""


def _is_peer_error(error: BaseException) -> bool:
    if isinstance(error, ZooError):
        return False
    if isinstance(error, getattr(dist, "DistError", ())):
        return True
    message = str(error).lower()
    return isinstance(error, (RuntimeError, ConnectionError, OSError)) and any(s in message for s in _PEER_ERRORS)


def worker_main() -> None:
    """Entry point of a worker process started by the supervisor (``python -c ... worker_main()``).

    Reads its assignment (pickled: rank, world size, store port, config, resume path, entry, ``sys.path``) from
    stdin, joins the process group, runs the entry and reports to the supervisor on the file descriptor named by
    its first argument. A worker runs no code of the user's main module (unlike multiprocessing's spawn), so a
    script that calls ``zoo.train`` needs no ``if __name__ == "__main__"`` guard.
    """
    conn = multiprocessing.connection.Connection(int(sys.argv[1]), readable=False)
    job = pickle.loads(sys.stdin.buffer.read())
    sys.path[:] = job["sys_path"]
    die_with_parent()
    rank, world_size = job["rank"], job["world_size"]
    code = 0
    try:
        module, name = job["entry"].split(":")
        entry = getattr(importlib.import_module(module), name)
        cfg = EasyDict(job["cfg"])
        load_run_plugins(cfg)  # a fresh interpreter: the registries start empty
        timeout = datetime.timedelta(seconds=float(cfg.pipeline.timeout_s))
        store = dist.TCPStore("127.0.0.1", job["port"], world_size, is_master=False, timeout=timeout)
        dist.init_process_group(job["backend"], store=store, rank=rank, world_size=world_size, timeout=timeout)
        summary = entry(cfg, job["resume"], lambda path: conn.send(("run_dir", str(path))), job["repair"])
        conn.send(("summary", summary))
    except KeyboardInterrupt:
        code = 130
    except BaseException as error:  # reported in one line; the supervisor decides what the user sees
        if debug():
            traceback.print_exc()
        try:
            conn.send(("failed", failure_line(error), _is_peer_error(error)))
        except OSError:
            pass
        code = 1
    finally:
        conn.close()
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a broken group cannot always be torn down cleanly; the process ends anyway
                pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a broken process group can hang it


class _Supervisor:
    """Starts the workers and watches them (see the module docstring)."""

    def __init__(self, cfg: EasyDict, resume: Path | None, entry: Callable[..., dict[str, Any]], repair: bool,
                 backend: str) -> None:
        self.cfg, self.resume, self.entry, self.repair, self.backend = cfg, resume, entry, repair, backend
        self.world_size = int(cfg.pipeline.world_size)
        self.processes: list[subprocess.Popen] = []
        self.connections: dict[multiprocessing.connection.Connection, int] = {}
        # Ctrl-C, SIGTERM, SIGHUP: forwarded to every worker as SIGTERM; a second Ctrl-C raises KeyboardInterrupt.
        self.stop = StopSignals("the workers save after the current iteration", on_first=self._forward)
        self.run_dir: str | None = str(resume) if resume is not None else None
        self.summary: dict[str, Any] | None = None
        self.failures: list[tuple[int, str, bool]] = []  # (rank, cause, only a consequence of a peer's failure)

    @property
    def signal(self) -> int | None:
        """The first stop signal this supervisor received (None until then)."""
        return self.stop.received

    def _forward(self, signum: int) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def _kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                pass

    def _start(self, rank: int, port: int) -> None:
        reader, writer = os.pipe()
        # numpy's BLAS gets one thread per worker, as in `zoo run` (see zoo.cli.console_main), also when the caller
        # is zoo.train() in a process whose numpy was loaded with more: workers side by side would oversubscribe.
        # LOCAL_RANK: this machine's rank, as torchrun sets it (a "cuda" device becomes cuda:LOCAL_RANK).
        env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
               "LOCAL_RANK": str(rank)}
        process = subprocess.Popen(
            [sys.executable, "-c", "from zoo.run.supervisor import worker_main; worker_main()", str(writer)],
            stdin=subprocess.PIPE, pass_fds=(writer,), env=env,
        )
        os.close(writer)
        self.processes.append(process)
        self.connections[multiprocessing.connection.Connection(reader, writable=False)] = rank
        job = {"rank": rank, "world_size": self.world_size, "port": port, "cfg": to_plain(self.cfg),
               "resume": None if self.resume is None else str(self.resume), "repair": self.repair,
               "backend": self.backend,
               "sys_path": list(sys.path),
               "entry": f"{self.entry.__module__}:{self.entry.__qualname__}"}
        assert process.stdin is not None
        process.stdin.write(pickle.dumps(job))
        process.stdin.close()

    def run(self) -> dict[str, Any]:
        timeout = datetime.timedelta(seconds=float(self.cfg.pipeline.timeout_s))
        store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, timeout=timeout, wait_for_workers=False)
        try:
            with self.stop:
                for rank in range(self.world_size):
                    self._start(rank, store.port)
                self._watch()
        except BaseException:
            self._kill_all()
            raise
        finally:
            for conn in self.connections:
                conn.close()
            del store
        return self._outcome()

    def _receive(self, conn: multiprocessing.connection.Connection) -> None:
        rank = self.connections[conn]
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the worker ended (its end of the pipe closed)
            del self.connections[conn]
            conn.close()
            return
        kind = message[0]
        if kind == "run_dir":
            self.run_dir = message[1]
        elif kind == "summary" and rank == 0:
            self.summary = message[1]
        elif kind == "failed":
            self.failures.append((rank, message[1], bool(message[2])))

    def _watch(self) -> None:
        stop_deadline: float | None = None
        while any(process.poll() is None for process in self.processes) or self.connections:
            for ready in multiprocessing.connection.wait(list(self.connections), timeout=0.2):
                self._receive(ready)  # type: ignore[arg-type]
            for rank, process in enumerate(self.processes):
                code = process.poll()
                if code is not None and code != 0 and not any(failed == rank for failed, _, _ in self.failures):
                    if code < 0:
                        self.failures.append((rank, exit_cause(code), False))
                    elif code != 130 or self.signal is None:
                        self.failures.append((rank, exit_cause(code), True))
            exited = any(process.poll() not in (None, 0) for process in self.processes)
            if (self.failures or self.signal is not None and exited) and stop_deadline is None:
                # The others fail on their own at their next collective (its peer is gone): give them a moment.
                stop_deadline = time.monotonic() + _STOP_GRACE_S
            if stop_deadline is not None and time.monotonic() > stop_deadline:
                self._kill_all()
                for conn in self.connections:
                    conn.close()
                self.connections.clear()

    def _outcome(self) -> dict[str, Any]:
        for process in self.processes:
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()
        own = [failure for failure in self.failures if not failure[2]]
        if self.failures and (self.summary is None or own):
            rank, cause, _ = (own or self.failures)[0]
            where = (f"; the last checkpoint in {self.run_dir} is intact: zoo run --resume {self.run_dir}"
                     if self.run_dir is not None else "")
            raise WorkerError(f"worker {rank} of {self.world_size} {_verb(cause)}; all workers were stopped{where}")
        if self.summary is None:
            if self.signal is not None:
                raise KeyboardInterrupt
            raise WorkerError(f"the workers ended without a result (exit codes "
                              f"{[process.returncode for process in self.processes]})")
        summary = dict(self.summary)
        if self.signal is not None:
            summary["exit_code"] = 128 + int(self.signal)
        return summary


def _verb(cause: str) -> str:
    return cause if cause.startswith(("was killed", "exited")) else f"failed: {cause}"


def spawn(cfg: EasyDict, resume: Path | None, entry: Callable[..., dict[str, Any]], repair: bool = False,
          backend: str = "gloo") -> dict[str, Any]:
    """Run ``entry(cfg, resume, on_run_dir, repair)`` (a module-level function) in ``cfg.pipeline.world_size`` worker
    processes on loopback joined by ``backend``; return rank 0's summary. Raises ConfigError (one line, before any
    process starts) when this machine cannot hold that many workers, WorkerError (one line) when a worker fails;
    see the module docstring."""
    check_processes("DPPO workers", int(cfg.pipeline.world_size), "lower pipeline.world_size")
    return _Supervisor(cfg, resume, entry, repair, backend).run()
