"""The callbacks of a trial's run: report each evaluation to the study, stop the run when the pruner says so.

``zoo tune`` lists this module in every trial's ``import_names`` and tells the trial's ``zoo run`` process which
study and trial it is through the environment (``ZOO_TUNE_STORAGE``, ``ZOO_TUNE_STUDY``, ``ZOO_TUNE_TRIAL``; with
several seeds, ``ZOO_TUNE_REPORT=0`` for the seeds after the first, which train but neither report nor prune).
Without them (a trial's run directory resumed or reproduced by hand) the hooks do nothing: a trial stays an
ordinary run directory. The storage URL goes through the environment, not the config, so that a database password
never lands in config.yaml.

After each evaluation (``on_evaluation``) the row's ``tune.metric`` becomes the trial's intermediate value at the
row's env steps, and the study's pruner is asked. An evaluation a resumed run makes again (the same step, the same
value: resume is exact) is not reported twice. When the pruner prunes, the trial records it (user attribute
``zoo_pruned_at``: the env steps) before ``should_stop`` answers True, so that the run then saves its checkpoint
and ends with reason ``callback``, and ``zoo tune`` (this one or, after a kill, the next) marks the trial pruned.
When the study database fails under the run (a disk I/O error, a lock held beyond the timeout, a read-only file),
the run stops as on SIGTERM: it saves and ends ``interrupted``, its trial stays RUNNING, and the next ``zoo tune``
continues it from that checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from typing import Any

from ..errors import first_line
from ..hookspecs import hookimpl
from .space import parse_settings
from .study import load_study, make_pruner, open_storage, optuna_module, storage_errors

ENV_STORAGE = "ZOO_TUNE_STORAGE"
ENV_STUDY = "ZOO_TUNE_STUDY"
ENV_TRIAL = "ZOO_TUNE_TRIAL"
ENV_REPORT = "ZOO_TUNE_REPORT"
PRUNED_ATTR = "zoo_pruned_at"


class _Reporter:
    """The trial this process trains, opened on its first evaluation."""

    def __init__(self, cfg: Mapping[str, Any], url: str, study_name: str, number: int) -> None:
        optuna = optuna_module()
        settings = parse_settings(cfg.get("tune"), cfg["policy"]["type"])
        self.metric = settings.metric
        self.storage = open_storage(url, create=False)
        # The sampler is the parent's business; a trial object built here only needs one that costs nothing.
        study = load_study(self.storage, study_name, url, make_pruner(settings), optuna.samplers.RandomSampler())
        study_id = self.storage.get_study_id_from_name(study_name)
        self.trial_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, number)
        self.trial = optuna.trial.Trial(study, self.trial_id)
        self.pruned = PRUNED_ATTR in self.storage.get_trial(self.trial_id).user_attrs

    def evaluated(self, row: Mapping[str, Any]) -> None:
        value, step = row.get(self.metric), int(row["env_steps"])
        if value is None or self.pruned:
            return
        if step not in self.storage.get_trial(self.trial_id).intermediate_values:
            self.trial.report(float(value), step)
        if self.trial.should_prune():
            self.trial.set_user_attr(PRUNED_ATTR, step)
            self.pruned = True


_reporter: _Reporter | None = None


def _active(cfg: Mapping[str, Any]) -> _Reporter | None:
    global _reporter
    if _reporter is None and os.environ.get(ENV_STORAGE) and os.environ.get(ENV_REPORT, "1") == "1":
        _reporter = _Reporter(cfg, os.environ[ENV_STORAGE], os.environ[ENV_STUDY], int(os.environ[ENV_TRIAL]))
    return _reporter


@hookimpl
def on_evaluation(returns: list, row: dict, run_dir: str | None, cfg: dict) -> None:
    """Report the evaluation's row to the trial and ask the pruner (see the module docstring)."""
    try:
        reporter = _active(cfg)
        if reporter is not None:
            reporter.evaluated(row)
    except storage_errors() as exc:
        logging.getLogger("zoo").warning(f"the study database failed ({first_line(exc, 200)}): stopping this trial's "
                                         f"run as on SIGTERM (it saves; the next zoo tune continues it)")
        os.kill(os.getpid(), signal.SIGTERM)


@hookimpl
def should_stop(row: dict, cfg: dict) -> bool | None:
    """True once the pruner has pruned this trial: the run saves and ends with reason ``callback``."""
    return True if _reporter is not None and _reporter.pruned else None
