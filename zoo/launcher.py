"""Starting and supervising the worker processes of a multi-process pipeline (``parallel_sync``).

Two ways in, one code path:

- ``zoo run`` / ``zoo.train`` on one machine: this process becomes a supervisor. It hosts the rendezvous store
  on a free loopback port (the OS picks it, so there is no race for a port), starts ``world_size`` fresh Python
  worker processes (each loads plugins and ``import_names`` again, and never re-runs the caller's script) and
  watches them. Each worker joins the gloo (CPU) or nccl (CUDA) process group and runs the same training code
  as a serial run; rank 0 alone owns the run directory.
- ``torchrun ... -m zoo run --config FILE``: each process torchrun starts finds RANK, WORLD_SIZE, LOCAL_RANK,
  MASTER_ADDR and MASTER_PORT in its environment and joins the process group itself; torchrun supervises. Each
  rank also watches torchrun's agent: if the agent dies, the ranks stop as on SIGTERM (``join_from_environment``).

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

import atexit
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

import torch
import torch.distributed as dist
from easydict import EasyDict

from .config import to_plain
from .errors import ConfigError, ZooError
from .lifetime import die_with_parent, exit_cause, failure_line, stop_when_parent_dies
from .pipelines.signals import StopSignals
from .plugins import import_modules, load_plugins
from .registry import PIPELINE_REGISTRY
from .sizes import check_processes

# How long the supervisor lets the other workers exit on their own after one failed, before killing them.
_STOP_GRACE_S = 5.0
# Substrings of errors that only say a collective lost its peer (a consequence, not a cause).
_PEER_ERRORS = ("connection closed by peer", "connection reset", "broken pipe", "gloo", "nccl", "timed out",
                "socket", "disconnect")
_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# How long a torchrun rank whose agent died may take to save and exit after its SIGTERM before it is ended.
_ORPHAN_GRACE_S = 30.0


log = logging.getLogger("zoo")


class WorkerError(ZooError):
    """A worker process failed (an exception or a kill); the run was stopped."""


def is_distributed(cfg: EasyDict) -> bool:
    """Whether the config's pipeline is a multi-process one (its class sets ``distributed = True``)."""
    return bool(getattr(PIPELINE_REGISTRY.get(cfg.pipeline.type), "distributed", False))


def is_actor_learner(cfg: EasyDict) -> bool:
    """Whether the config's pipeline is an actor-learner one (its class sets ``actor_learner = True``)."""
    return bool(getattr(PIPELINE_REGISTRY.get(cfg.pipeline.type), "actor_learner", False))


def join_actor_learner(cfg: EasyDict) -> int:
    """Join the gloo process group torchrun describes as an actor-learner job: rank 0 is the learner, every other
    rank an actor (``pipeline.num_actors`` becomes WORLD_SIZE - 1). Returns this process's rank. Like every
    torchrun rank, this process stops when torchrun's agent dies (see ``join_from_environment``)."""
    stop_when_parent_dies(_ORPHAN_GRACE_S)
    world_size, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if world_size < 2:
        raise ConfigError(f"pipeline '{cfg.pipeline.type}' under torchrun needs a learner and at least one actor, "
                          f"but WORLD_SIZE is {world_size}: start 2 or more processes, or use `zoo run` alone")
    if world_size - 1 != cfg.pipeline.num_actors and rank == 0:
        log.info(f"pipeline.num_actors is {cfg.pipeline.num_actors} in the config; torchrun started "
                 f"{world_size} processes: rank 0 learns, {world_size - 1} act")
    cfg.pipeline.num_actors = world_size - 1
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="env://")
        _destroy_at_exit()
    return rank


def _destroy_at_exit() -> None:
    # A torchrun rank ends with its process group destroyed, as torch asks: left to the interpreter's teardown,
    # the group of a rank whose agent had died (its store gone) aborted in C++ in about one exit in eight
    # ("terminate called without an active exception"), after the rank had stopped and saved.
    def destroy() -> None:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a broken group cannot always be torn down cleanly; the process ends anyway
                pass

    atexit.register(destroy)


def under_torchrun() -> bool:
    """True in a process started by torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR/PORT)."""
    return all(name in os.environ for name in _TORCHRUN_VARIABLES)


def _backend(cfg: EasyDict) -> str:
    backend = cfg.pipeline.get("backend", "auto")
    if backend == "auto":
        return "nccl" if str(cfg.device).startswith("cuda") else "gloo"
    return backend


def check_backend(cfg: EasyDict) -> None:
    """Refuse (ConfigError) a backend the config's device cannot use, before any process starts."""
    if _backend(cfg) == "nccl" and not str(cfg.device).startswith("cuda"):
        raise ConfigError(f"pipeline.backend 'nccl' needs CUDA but device is '{cfg.device}': "
                          f"set device=cuda, or pipeline.backend=gloo (or auto)")
    if _backend(cfg) == "nccl" and not dist.is_nccl_available():
        raise ConfigError("pipeline.backend 'nccl' is not available in this torch build: use pipeline.backend=gloo")


def _place_on_device(cfg: EasyDict, local_rank: int) -> None:
    # One GPU per worker on a machine: a plain "cuda" device becomes cuda:LOCAL_RANK (modulo the GPUs there).
    if str(cfg.device).startswith("cuda") and torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        cfg.device = f"cuda:{index}"
        torch.cuda.set_device(index)


def join_from_environment(cfg: EasyDict) -> None:
    """Join the process group torchrun describes (env://), adopting its WORLD_SIZE as ``pipeline.world_size``.

    The rank also watches torchrun's agent, its parent: if the agent dies (SIGKILL, OOM), nothing else would stop
    the ranks, which would train on with rank 0 holding the run directory's lock. Their SIGTERM handling runs
    instead (the loop's stop: every rank after the same iteration, rank 0 saves and unlocks) and they exit, or are
    ended 30 s later. Not ``die_with_parent``: its signal follows the agent's *thread* that started the rank, which
    need not live as long as the agent.
    """
    stop_when_parent_dies(_ORPHAN_GRACE_S)
    if dist.is_initialized():
        return
    world_size = int(os.environ["WORLD_SIZE"])
    if world_size != cfg.pipeline.world_size and int(os.environ["RANK"]) == 0:
        log.info(f"pipeline.world_size is {cfg.pipeline.world_size} in the config; torchrun started "
                 f"{world_size} processes: using {world_size}")
    cfg.pipeline.world_size = world_size
    _place_on_device(cfg, int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(_backend(cfg), init_method="env://",
                            timeout=datetime.timedelta(seconds=float(cfg.pipeline.timeout_s)))
    _destroy_at_exit()


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
        load_plugins()  # a fresh interpreter: the registries start empty
        import_modules(list(cfg.get("import_names") or []), list(cfg.get("import_paths") or []))
        _place_on_device(cfg, rank)
        timeout = datetime.timedelta(seconds=float(cfg.pipeline.timeout_s))
        store = dist.TCPStore("127.0.0.1", job["port"], world_size, is_master=False, timeout=timeout)
        dist.init_process_group(_backend(cfg), store=store, rank=rank, world_size=world_size, timeout=timeout)
        summary = entry(cfg, job["resume"], lambda path: conn.send(("run_dir", str(path))), job["repair"])
        conn.send(("summary", summary))
    except KeyboardInterrupt:
        code = 130
    except BaseException as error:  # reported in one line; the supervisor decides what the user sees
        if os.environ.get("ZOO_DEBUG"):
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

    def __init__(self, cfg: EasyDict, resume: Path | None, entry: Callable[..., dict[str, Any]],
                 repair: bool = False) -> None:
        self.cfg, self.resume, self.entry, self.repair = cfg, resume, entry, repair
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
        env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
        process = subprocess.Popen(
            [sys.executable, "-c", "from zoo.launcher import worker_main; worker_main()", str(writer)],
            stdin=subprocess.PIPE, pass_fds=(writer,), env=env,
        )
        os.close(writer)
        self.processes.append(process)
        self.connections[multiprocessing.connection.Connection(reader, writable=False)] = rank
        job = {"rank": rank, "world_size": self.world_size, "port": port, "cfg": to_plain(self.cfg),
               "resume": None if self.resume is None else str(self.resume), "repair": self.repair,
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


def spawn(cfg: EasyDict, resume: Path | None, entry: Callable[..., dict[str, Any]], repair: bool = False
          ) -> dict[str, Any]:
    """Run ``entry(cfg, resume, on_run_dir, repair)`` (a module-level function) in ``cfg.pipeline.world_size`` worker
    processes on loopback; return rank 0's summary. Raises ConfigError (one line, before any process starts) when
    this machine cannot hold that many workers, WorkerError (one line) when a worker fails; see the module
    docstring."""
    # Here and not in validation: only workers started on this machine count (under torchrun they are spread
    # over machines and already running).
    check_processes("DPPO workers", int(cfg.pipeline.world_size), "lower pipeline.world_size")
    return _Supervisor(cfg, resume, entry, repair).run()
