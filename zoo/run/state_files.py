"""Files that are never half-written and never run code: atomic writes, weights-only state, one-line errors, and
reading only regular files.

Everything zoo saves (checkpoints, models, replay files, config, metrics rewrites) is written to a temporary file
beside its target, fsync-ed and renamed over it: a reader sees the old file or the new one. State is stored so that
``torch.load(weights_only=True)`` reads it: tensors and plain Python values only (numpy arrays and bytes become
uint8 tensors), so loading a file never runs code from it.

A run directory may be someone else's, and any of its names may be a FIFO (``open`` would wait for a writer
forever, and Python retries an ``open`` that a signal interrupts), a device (``/dev/zero`` never ends; opening some
devices acts), a socket or a folder. ``open_regular`` refuses anything but a regular file from its ``stat`` (a
symbolic link is judged by what it points to), before opening it, and opens with ``O_NONBLOCK`` so that a name
swapped for a FIFO in between cannot block either; ``read_regular`` adds a size bound.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import re
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from ..errors import RunDirectoryError, first_line


def _file_mode() -> int:
    # mkstemp creates 0o600 files; run files should be readable as any other file the user writes.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _file_mode()


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` (``st_mode``) is when it is not a regular file ("a FIFO (named pipe)"), else None."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "of an unknown kind")


class RefusedFile(RunDirectoryError):
    """A file zoo will not read: not a regular file, or larger than its bound; ``reason`` says which ("is a FIFO
    (named pipe), not a regular file")."""

    def __init__(self, path: Path, reason: str, fix: str) -> None:
        super().__init__(f"'{path}' {reason}: {fix}")
        self.reason = reason


def _refused(path: Path, kind: str) -> RefusedFile:
    return RefusedFile(path, f"is {kind}, not a regular file", "zoo reads only regular files from a run directory "
                       "or a results folder; move it away")


def _too_large(path: Path, max_bytes: int) -> RefusedFile:
    return RefusedFile(path, f"is larger than {max_bytes:,} bytes", "not a file zoo wrote there; move it away")


def check_regular(path: Path) -> None:
    """A ``RefusedFile`` line when ``path`` exists and is not a regular file (through any symbolic link); nothing
    when it is one, or is missing (the caller's reader says so), or cannot be looked at."""
    try:
        kind = not_regular(os.stat(path).st_mode)
    except OSError:
        return
    if kind is not None:
        raise _refused(path, kind)


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for binary reading when it is a regular file (through any symbolic link); a FIFO, device,
    socket or folder is one RunDirectoryError line (``RefusedFile``), decided before anything opens it (see the
    module docstring). A missing file raises FileNotFoundError; another OSError goes up as it is."""
    kind = not_regular(os.stat(path).st_mode)
    if kind is not None:
        raise _refused(path, kind)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = not_regular(os.fstat(descriptor).st_mode)  # swapped between the stat and the open
        if kind is not None:
            raise _refused(path, kind)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``); with ``max_bytes``, a ``RefusedFile`` line for a
    file larger than that, decided from its size before it is read (and re-checked while reading)."""
    with open_regular(path) as stream:
        if max_bytes is None:
            return stream.read()
        if os.fstat(stream.fileno()).st_size > max_bytes:
            raise _too_large(path, max_bytes)
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while it was read
        raise _too_large(path, max_bytes)
    return data


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through ``write`` to a temporary file beside ``path``, fsync it, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(temporary, _FILE_MODE)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` that never leaves a half-written file: a reader sees the old file or the new one."""
    # Serialised in memory first: torch's zip writer reports a short write (a full disk, ``ulimit -f``) as a
    # RuntimeError about stream positions; a plain write of the bytes raises the OSError that says why.
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    _atomic_write(path, lambda stream: stream.write(buffer.getbuffer()))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a reader sees the old file or the new one)."""
    _atomic_write(path, lambda stream: stream.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    _atomic_write(path, lambda stream: stream.write(text.encode("utf-8")))


def _write_error(shown: Path, exc: OSError) -> RunDirectoryError:
    """One line for a write that the system refused (the file on disk is still the previous whole one)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space on that disk (or raise the quota), or use another runs_dir"
    elif exc.errno == errno.EFBIG:
        fix = "the file size limit (ulimit -f) is too small for it: raise it"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "make the run directory writable, or copy it somewhere writable and resume the copy"
    else:
        fix = "check the disk and the directory"
    return RunDirectoryError(f"cannot write '{shown}' ({exc.strerror or first_line(exc)}): {fix}; the last "
                             f"checkpoint is kept")


@contextmanager
def writing(shown: Path) -> Iterator[None]:
    """Turn an OSError of the writes inside into one RunDirectoryError line naming ``shown`` and the fix."""
    try:
        yield
    except OSError as exc:
        raise _write_error(shown, exc) from None


# -- weights-only-safe state ------------------------------------------------------------------------------
def encode_state(value: Any) -> Any:
    """``value`` with numpy arrays and scalars replaced by plain values that ``weights_only`` loading accepts."""
    if isinstance(value, dict):
        return {key: encode_state(child) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        children = [encode_state(child) for child in value]
        return tuple(children) if isinstance(value, tuple) else children
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("object arrays cannot be stored in a checkpoint")
        return {"__ndarray__": _byte_tensor(value), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        # As a uint8 tensor: weights-only loading refuses an empty bytes object (pickled as a call of bytes()),
        # and a tensor is stored raw instead of as a latin-1 string.
        return {"__bytes__": _byte_tensor(np.frombuffer(value, dtype=np.uint8))}
    return value


def _byte_tensor(array: np.ndarray) -> torch.Tensor:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return torch.from_numpy(flat if flat.flags.writeable else flat.copy())


def _array_bytes(payload: Any) -> np.ndarray:
    # Checkpoints written before arrays were stored as tensors hold bytes.
    return payload.numpy() if isinstance(payload, torch.Tensor) else np.frombuffer(payload, dtype=np.uint8).copy()


def decode_state(value: Any) -> Any:
    """Inverse of ``encode_state``."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _array_bytes(value["__ndarray__"]).view(np.dtype(value["dtype"])).reshape(value["shape"])
        if "__bytes__" in value and len(value) == 1:
            return _array_bytes(value["__bytes__"]).tobytes()
        return {key: decode_state(child) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        children = [decode_state(child) for child in value]
        return tuple(children) if isinstance(value, tuple) else children
    return value


def load_weights_only(path: Path) -> Any:
    """``torch.load`` that never runs code from the file; any failure is one RunDirectoryError line."""
    try:
        data = read_regular(path)
    except FileNotFoundError:
        raise RunDirectoryError(f"'{path}' does not exist: the run has not saved it yet") from None
    except OSError as exc:
        raise RunDirectoryError(f"'{path}' cannot be read ({exc.strerror}): check its permissions") from None
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols; the error below says it all
            warnings.simplefilter("ignore")
            return decode_state(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))
    except Exception as exc:  # truncated, garbage, or carrying code that weights-only loading refuses
        text = str(exc)
        refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if refused or isinstance(exc, pickle.UnpicklingError):
            detail = f"it holds objects that are not weights ({refused.group(1) if refused else 'refused'})"
        else:
            detail = first_line(exc, 160)
        raise RunDirectoryError(
            f"'{path}' is not a loadable zoo file: {detail}; it is truncated, corrupted or not from zoo, and is "
            f"never unpickled: restore it from a copy or train again"
        ) from None
