"""User-facing errors: the CLI prints their message on one line and exits with code 2."""

import errno


class ZooError(Exception):
    """Base class for errors caused by user input (config, names, files); never a bug in zoo.

    Examples:
        >>> try:
        ...     raise ConfigError("policy.gamma must be <= 1, got 1.5: set it in [0, 1]")
        ... except ZooError as error:  # the CLI prints "zoo: error: " and this line, and exits with 2
        ...     print(error)
        policy.gamma must be <= 1, got 1.5: set it in [0, 1]
    """


class ConfigError(ZooError):
    """A config file or value is invalid: raise it (e.g. in ``check_spaces``) for a setting a policy cannot take.

    Examples:
        >>> error = ConfigError("action space Discrete(2) is not supported by my_policy: it takes a 1-D Box")
        >>> isinstance(error, ZooError), str(error).startswith("action space")
        (True, True)
    """


class UnknownNameError(ZooError, KeyError):
    """A registry lookup failed; the message lists what is registered and the closest match."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(ZooError):
    """Two sources registered the same name in one registry."""


class NonFiniteError(ZooError):
    """A loss, gradient or env output is NaN or infinite; the training loop names the iteration and stops.

    Examples:
        >>> isinstance(NonFiniteError("loss is NaN at iteration 12"), ZooError)  # one line, exit code 2
        True
    """


class EnvError(ZooError):
    """The user's env raised in ``step``/``reset`` or did not return in time (``env.call_timeout_s``); the message
    names the env id and the call.

    Examples:
        >>> isinstance(EnvError("env 'MyEnv-v0' raised in step: ValueError: bad action"), ZooError)  # one line
        True
    """


class RunDirectoryError(ZooError):
    """A run directory cannot be used: locked by another process, missing, unreadable or not a zoo run."""


def first_line(error: BaseException, limit: int | None = None) -> str:
    """The first line of ``error``'s message (at most ``limit`` characters), or its type's name if it has none:
    what a one-line report quotes of an exception."""
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__


# What the system says when it refuses a write for reasons the user controls (space, quota, size limit, rights).
REFUSED_WRITES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


def refused_write(path: object, error: OSError, fix: str) -> str:
    """One line for a write the system refused: the file, the system's reason, and ``fix``."""
    reason = error.strerror or first_line(error)
    where = f"'{path}'" if path is not None else "a file"
    if error.errno in (errno.EACCES, errno.EPERM):  # a read can be refused too
        return f"no permission for {where} ({reason}): {fix}"
    return f"cannot write {where} ({reason}): {fix}"
