"""The bench's run lock files (zoo.bench.locks), fast: what a taken lock file holds (this process's pid and host, and
nothing of an earlier, longer text), and that a lock file is never opened through a symbolic link or blocks on a FIFO
(issue 54: each fails under its one-line mutation)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from zoo.bench.locks import open_lock_file, take_lock
from zoo.errors import ZooError


def test_a_taken_lock_file_holds_exactly_this_process_and_host(tmp_path):
    path = tmp_path / "seed_0.lock"
    path.write_text("4194303 a-much-longer-host-name-than-this-one.example.org trailing words")  # an older holder
    descriptor, holder = take_lock(path, time.monotonic())
    try:
        assert holder == "" and descriptor is not None
        assert path.read_text() == f"{os.getpid()} {socket.gethostname()}"  # truncated first: no old tail
    finally:
        os.close(descriptor)


def test_a_held_lock_names_its_holder(tmp_path):
    path = tmp_path / "seed_1.lock"
    first, _ = take_lock(path, time.monotonic())
    try:
        os.pwrite(first, b"1 elsewhere.example.org", 0)  # a holder on another host: named, not looked up
        os.ftruncate(first, len(b"1 elsewhere.example.org"))
        second, holder = take_lock(path, time.monotonic())
        assert second is None and holder == "1 on elsewhere.example.org"
    finally:
        os.close(first)


def test_a_lock_file_is_never_opened_through_a_symbolic_link(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("someone's file")
    link = tmp_path / "seed_2.lock"
    link.symlink_to(target)
    with pytest.raises(ZooError, match=f"^cannot open the lock file '{link}'"):
        open_lock_file(link)
    with pytest.raises(ZooError):
        take_lock(link, time.monotonic())
    assert target.read_text() == "someone's file"  # never truncated, never written


def test_a_fifo_in_a_lock_files_place_is_refused_at_once(tmp_path):
    fifo = tmp_path / "seed_3.lock"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(ZooError, match="is a FIFO|is a named pipe|not a regular file|is a fifo"):
        open_lock_file(fifo)
    assert time.monotonic() - start < 5
