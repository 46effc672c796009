"""The hooks a zoo plugin may implement (pluggy project name ``"zoo"``).

A plugin is any importable module (or object) with functions marked ``@hookimpl`` whose names match the hook
specifications below. Each ``register_*`` hook receives one argument, ``register(name, obj)``, which binds ``obj``
under ``name`` in the matching registry (policies, envs, pipelines, models, benchmark suites) and records the
plugin's name as its source, so that ``zoo list``, ``zoo bench --list`` and duplicate-name errors can say where every
name came from. The built-in algorithms and suites use exactly the same path.

Writing a third-party plugin, in two steps:

1. A module in your package, e.g. ``my_zoo_ext/plugin.py``::

       from zoo.hookspecs import hookimpl
       from my_zoo_ext.policy import MyPolicy

       @hookimpl
       def register_policies(register):
           register("my_policy", MyPolicy)

2. An entry point in your package's ``pyproject.toml``; its name becomes the source shown by ``zoo list``::

       [project.entry-points.zoo]
       my_zoo_ext = "my_zoo_ext.plugin"

After ``pip install`` of your package, ``policy.type = "my_policy"`` works in any zoo config. Implement only
the hooks you need. Importing your plugin module should be cheap and free of side effects beyond
registration, because every spawned worker process loads plugins again.

For code that is not packaged, list its modules in a config's ``import_names`` instead and register with the
decorators, e.g. ``@POLICY_REGISTRY.register("my_policy")``.
"""

from __future__ import annotations

import pluggy

from .registry import RegisterFunction

PROJECT_NAME = "zoo"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""The marker of a plugin's hook implementations: ``@hookimpl`` on a function named as one of the hooks below (its
one argument named as the hook's), in the module your entry point names."""


@hookspec
def register_policies(register: RegisterFunction) -> None:
    """Register policy classes: call ``register(name, policy_class)`` once per policy.

    The name is what a config's ``policy.type`` refers to. Registering a name another plugin already uses
    raises DuplicateNameError naming both sources; zoo then skips this plugin with a warning. For example::

        @hookimpl
        def register_policies(register):
            register("my_policy", MyPolicy)  # a zoo.policies.Policy subclass; policy.type = "my_policy"
    """


@hookspec
def register_envs(register: RegisterFunction) -> None:
    """Register environment factories: call ``register(name, factory)`` once per environment.

    The factory contract:

    - zoo calls ``factory(**env.kwargs)`` (the config's ``env.kwargs``) once per sub-env, and must get a new
      ``gymnasium.Env``. Name the keyword arguments explicitly: unknown ``env.kwargs`` are then refused in one
      line before training, listing the ones the factory accepts.
    - Time limits: ``env.max_episode_steps`` wraps each sub-env in ``gymnasium.wrappers.TimeLimit`` (its ends are
      truncations, which bootstrap). A factory may add its own TimeLimit instead. An env whose episodes never end
      trains, but evaluation stops with an error after ``pipeline.eval_step_limit`` steps.
    - Pickling: the factory and the env it returns should be picklable (plain module-level functions and
      classes), so that a checkpoint can hold the env's episodes in progress and ``--resume`` continues them
      exactly. An env that cannot be pickled still trains; a resumed run then starts fresh episodes.
    - Observations: a Box (vectors, or uint8 images, which the actor-critic policies encode with a CNN); Dict,
      Tuple, Discrete, MultiDiscrete and MultiBinary observations are flattened into a Box when the env is built,
      other spaces are refused. NaN or infinite rewards and observations stop the run with an error naming the env.

    For example::

        def make_my_env(size: int = 8) -> gymnasium.Env:  # env.kwargs: {size: 16}
            return MyEnv(size)

        @hookimpl
        def register_envs(register):
            register("my_env", make_my_env)  # env.id = "my_env"
    """


@hookspec
def register_pipelines(register: RegisterFunction) -> None:
    """Register training pipelines: call ``register(name, pipeline_class)``. For example::

        @hookimpl
        def register_pipelines(register):
            register("my_pipeline", MyPipeline)  # pipeline.type = "my_pipeline", named in a policy's pipelines
    """


@hookspec
def register_models(register: RegisterFunction) -> None:
    """Register network (model) classes: call ``register(name, model_class)``.

    An observation encoder for the actor-critic policies (``policy.encoder: NAME``) is a class or factory called as
    ``model_class(observation_space, **policy.encoder_kwargs)`` that returns an ``nn.Module`` mapping observations
    ``(..., *obs_shape)`` to features ``(..., output_dim)``, with an integer attribute ``output_dim``. For example::

        @hookimpl
        def register_models(register):
            register("my_encoder", MyEncoder)  # policy.encoder = "my_encoder": MyEncoder(observation_space, **kwargs)
    """


@hookspec
def register_bench_suites(register: RegisterFunction) -> None:
    """Register benchmark suites for ``zoo bench``: call ``register(name, entries)`` once per suite, ``entries`` a
    non-empty tuple of ``zoo.bench.suites.Entry``.

    A suite of a plugin is trained (``zoo bench NAME``), resumed and reported (``--report``) exactly as the
    built-in ones, which register through this hook too; ``zoo bench --list`` shows each suite with its source.
    Each entry gives its run folder's name (``runs/bench/<name>/seed_<k>``: prefix yours with your plugin's name,
    the folders are shared with every other suite), its config file, its ``--set`` overrides (the budget),
    ``seeds``, ``est_minutes`` (one seed, for the ETA) and optionally ``published``: figures of other libraries
    (``zoo.bench.published.Published``) that the report shows beside the entry's scores.

    Where ``config`` resolves: an absolute path is used as it is (a config shipped in your package: build it from
    your module's ``__file__``, and list the file as package data); a relative one is a file of zoo's own
    ``configs/`` folder (a zoo clone's, where the built-in suites' configs are). Example::

        from pathlib import Path
        from zoo.bench.suites import Entry
        from zoo.hookspecs import hookimpl

        HERE = Path(__file__).resolve().parent

        @hookimpl
        def register_bench_suites(register):
            budget = ("pipeline.max_env_steps=50000", "pipeline.stop_return=None")
            register("my_ext", (Entry("my_ext_pendulum", str(HERE / "configs" / "pendulum.py"), budget,
                                      est_minutes=2.0, seeds=5),))

    A name another source already registers with other entries raises DuplicateNameError naming both sources;
    zoo then skips this plugin with a warning.
    """


# -- callbacks: called by the training loop of every pipeline, in the process that writes the run directory -------
@hookspec
def on_metrics_row(row: dict, run_dir: str | None, cfg: dict) -> None:
    """After every metrics row is written (``row``: the row's keys and values, as in metrics.jsonl), e.g. to send
    it to W&B or MLflow. ``run_dir`` is the run directory; ``cfg`` the resolved config. For example::

        @hookimpl
        def on_metrics_row(row, run_dir, cfg):
            wandb.log(row, step=row["env_steps"])
    """


@hookspec
def on_evaluation(returns: list, row: dict, run_dir: str | None, cfg: dict) -> None:
    """After every evaluation during training: the episodes' returns and the row that will carry their mean. For
    example::

        @hookimpl
        def on_evaluation(returns, row, run_dir, cfg):
            print(f"{row['env_steps']} env steps: worst evaluation episode {min(returns):.1f}")
    """


@hookspec
def should_stop(row: dict, cfg: dict) -> bool | None:
    """A custom stop rule, asked after every row: return True to stop the run now (it saves and ends with reason
    ``callback``). Every process of a multi-process run stops together. For example::

        @hookimpl
        def should_stop(row, cfg):
            return row.get("eval_return_mean") is not None and row["eval_return_mean"] >= 195.0
    """


@hookspec
def on_run_end(summary: dict, run_dir: str | None, cfg: dict) -> None:
    """Once, when the run ends (any reason but an error), after its last save: the summary ``zoo run`` prints. For
    example::

        @hookimpl
        def on_run_end(summary, run_dir, cfg):
            print(f"{cfg['policy']['type']} ended ({summary['reason']}) after {summary['env_steps']} env steps")
    """

