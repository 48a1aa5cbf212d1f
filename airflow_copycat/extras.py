"""Optional dependencies: what each of the package's extras installs, and the error that names the
extra when a module of one is missing.

* ``jdbc`` -- the database drivers of the JDBC source and sink: psycopg (PostgreSQL), PyMySQL
  (MySQL/MariaDB), ADBC's PostgreSQL driver (the batch path); SQLite needs none.
* ``cdc`` -- psycopg, for PostgreSQL change data capture.
* ``distcp`` -- the Distcp converters' libraries: cryptography (encrypt/decrypt) and, before
  Python 3.14, backports.zstd (unzstd).

``pip install 'airflow-copycat[jdbc,cdc,distcp]'`` installs all of them. Imports nothing itself: any
layer may use it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA_OF = {"psycopg": "jdbc", "pymysql": "jdbc", "adbc_driver_postgresql": "jdbc", "adbc_driver_manager": "jdbc",
            "cryptography": "distcp", "backports": "distcp", "compression": "distcp"}
"""Top-level module -> the extra that installs it (``cdc`` users get psycopg from ``cdc`` too)."""


class MissingExtra(ImportError):
    """A module of an optional dependency is not installed; the message names the extra."""


def missing(module: str, extra: str, needed_by: str) -> MissingExtra:
    """The error for ``module`` missing when ``needed_by`` (a connector, a converter) needs it."""
    return MissingExtra(f"{needed_by} needs the Python module {module!r}, which is not installed: "
                        f"pip install 'airflow-copycat[{extra}]' (on the Airflow workers and on every Spark executor)")


def require(module: str, extra: str, needed_by: str) -> ModuleType:
    """``import module``, or :class:`MissingExtra` naming ``extra`` when it (or what it needs) is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise missing(module, extra, needed_by) from e


def explain(e: ImportError, extra: str, needed_by: str) -> ImportError:
    """``e`` as :class:`MissingExtra` when the module it lacks belongs to ``extra``; else ``e``."""
    top = (e.name or "").split(".")[0]
    if top and EXTRA_OF.get(top) == extra or (top == "psycopg" and extra == "cdc"):
        return missing(e.name, extra, needed_by)
    return e
