"""Counting how often a run derives things from a connector config: validations, window parses,
converters built, framework keys parsed. The functions are wrapped wherever a module of the package
holds them (``from x import f`` copies included), so every call site counts; tests assert the totals
of one plan + run (the "parse once" rule: see :mod:`airflow_copycat.runtime.spec`)."""

from __future__ import annotations

import collections
import functools
import os
import sys
import traceback
from dataclasses import dataclass, field

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class ParseCounts:
    """Calls per label, and per label the package file that made each call."""

    calls: collections.Counter = field(default_factory=collections.Counter)
    callers: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))

    def reset(self) -> None:
        self.calls.clear()
        self.callers.clear()

    def by(self, label: str, path_part: str) -> int:
        """Calls of ``label`` made from files whose path holds ``path_part``."""
        return sum(n for caller, n in self.callers[label].items() if path_part in caller)

    def __str__(self) -> str:
        return "; ".join(f"{k}: {v} {dict(self.callers[k])}" for k, v in sorted(self.calls.items()))


def _caller() -> str:
    """The nearest caller inside the package (or spark_apps), as a path relative to the repo."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = os.path.relpath(frame.filename, ROOT)
        if path.startswith(("airflow_copycat", "spark_apps")):
            return f"{path}:{frame.lineno}"
    return "?"


def _wrap(counts: ParseCounts, label: str, fn):
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        counts.calls[label] += 1
        counts.callers[label][_caller()] += 1
        return fn(*args, **kwargs)

    return counted


def install(monkeypatch: pytest.MonkeyPatch) -> ParseCounts:
    """Wrap the functions that derive from a config, in every loaded module of the package holding them."""
    from airflow_copycat.connect import connector
    from airflow_copycat.runtime import connector_config, plugins, settings, transforms
    from airflow_copycat.runtime import plan, sink, source, spec, windows, executor, jobs  # noqa: F401 -- loaded

    counts = ParseCounts()
    targets = [(connector_config.validate, "validate"), (connector.window_bounds, "window_bounds"),
               (plugins.make_converter, "make_converter"), (connector_config.restore_secrets, "restore_secrets"),
               (transforms.check_transforms, "check_transforms")]
    for fn, label in targets:
        wrapped = _wrap(counts, label, fn)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(("airflow_copycat", "spark_apps")):
                for name, value in list(vars(module).items()):
                    if value is fn:
                        monkeypatch.setattr(module, name, wrapped)
    monkeypatch.setattr(jobs.ConnectorJob, "secret_keys",
                        _wrap(counts, "Job.secret_keys", jobs.ConnectorJob.secret_keys))
    of = settings.FrameworkSettings.of.__func__
    monkeypatch.setattr(settings.FrameworkSettings, "of", classmethod(_wrap(counts, "FrameworkSettings.of", of)))
    fw = connector_config.FRAMEWORK_CONFIG
    monkeypatch.setattr(fw, "_parse", _wrap(counts, "framework keys parsed", fw._parse))
    return counts
