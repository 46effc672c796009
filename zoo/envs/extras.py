"""Which pip install provides a module that an env failed to import: zoo's extra for the env's family (``pip
install 'zoo-rl[mujoco]'``) when that extra installs the module, else the module's own package.

Each extra in pyproject.toml names gymnasium's extra for its envs (which lists what they import) plus what zoo's
own code for them imports; ``EXTRA_MODULES`` says which top-level modules each one installs.
"""

from __future__ import annotations

from ..errors import ZooError, first_line

# zoo's extra for gymnasium's env families, by the prefix of the env's entry point.
EXTRAS = {"gymnasium.envs.mujoco": "mujoco", "ale_py": "atari"}
# The top-level modules each extra installs (what its envs import).
EXTRA_MODULES = {"mujoco": {"mujoco", "imageio", "packaging"}, "atari": {"ale_py", "cv2"}}
# zoo's extra for a package of envs named by a "module:EnvId" id, by the module's name.
MODULE_EXTRAS = {"popgym": "popgym"}
# pip's name for a module whose distribution is named otherwise.
DISTRIBUTIONS = {"cv2": "opencv-python-headless", "ale_py": "ale-py"}


def missing_module(exc: BaseException | None) -> str | None:
    """The top-level name of the module whose import failed, from ``exc`` or what caused it (gymnasium's
    DependencyNotInstalled wraps the ModuleNotFoundError), or None when none names it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and name:
            return str(name).split(".")[0]
        exc = exc.__cause__ or exc.__context__
    return None


def missing_package_error(env_id: str, entry_point: str, exc: BaseException) -> ZooError:
    """One line for an env (gymnasium ``entry_point``, or "") whose construction failed to import a module."""
    extra = next((name for prefix, name in EXTRAS.items() if entry_point.startswith(prefix)), None)
    module = missing_module(exc)
    if module is None:
        fix = f"pip install 'zoo-rl[{extra}]'" if extra else "install the missing package"
        return ZooError(f"env '{env_id}' needs a package that is not installed ({first_line(exc)}): {fix}")
    if extra is None and module in MODULE_EXTRAS:  # a package of envs zoo has an extra for (popgym)
        return ZooError(f"env '{env_id}' needs the module '{module}', which is not installed: pip install "
                        f"'zoo-rl[{MODULE_EXTRAS[module]}]'")
    if extra is not None and module in EXTRA_MODULES[extra]:
        fix = f"pip install 'zoo-rl[{extra}]'"
    else:
        also = f" (zoo-rl[{extra}] does not install it)" if extra else ""
        fix = f"pip install {DISTRIBUTIONS.get(module, module)}{also}"
    return ZooError(f"env '{env_id}' needs the module '{module}', which is not installed: {fix}")
