"""``copycat``: Kafka Connect's standalone mode on the command line.

``connect-standalone worker.properties connector.properties ...`` runs connectors
until it is stopped; ``copycat run`` runs each connector **once**, as one bounded
batch -- the same plan, task groups, PySpark application and offset commits an
Airflow DAG run uses -- and then exits, saying what it moved::

    copycat validate CONFIG...                 check configs, never contacts Kafka
    copycat plan [--worker W] CONFIG           print the plan (task groups) as JSON
    copycat run [--worker W] CONFIG...         one bounded run of each connector
    copycat run --replay-dlq [--worker W] CONFIG...   re-ingest each connector's dead-letter queue
    copycat offsets [--worker W] [CONNECTOR]   list, set or delete committed source offsets
    copycat copy [--worker W] CONFIG [--master URL | --remote sc://... | --in-process]   copy a file tree (Distcp)

``WORKER`` is a Kafka Connect worker ``.properties`` file; ``COPYCAT_*``
environment variables (``COPYCAT_BOOTSTRAP_SERVERS``, ...) override it. A
``CONFIG`` is Kafka Connect connector JSON (``{"name": ..., "config": {...}}``),
a flat JSON or YAML mapping, a connector ``.properties`` file as
``connect-standalone`` takes, inline JSON text, or ``-`` for standard input.

Runs and plans go through :mod:`airflow_copycat.runtime` only (this module never
imports Airflow). ``run`` submits each task group exactly as the Airflow run
operator does (:mod:`airflow_copycat.runtime.submit`), sends it to a running Spark
over Spark Connect with ``--remote sc://host:port`` or ``$SPARK_REMOTE`` (from this
process, as the operator does with a ``spark_connect`` connection:
:func:`spark_apps.connect.run_group_over_connect`), or runs it in this process
with ``--in-process`` (:func:`airflow_copycat.runtime.executor.run_group`). While a
group runs, ``run`` and ``copy`` print its progress to stderr every
``progress.interval.ms`` of the worker (default 30 s) and, if they printed any, a
last line of what it moved (:mod:`airflow_copycat.runtime.progress`).

User errors (an invalid config, a missing file, Kafka out of reach) print one
message to stderr and exit 1; ``--verbose`` adds tracebacks, the runtime's INFO
logs and spark-submit's output. Secret values (connector ``PASSWORD`` keys and
any key named like a password, token or secret, and the worker's) are never
printed.

A module per subcommand: :mod:`.plan` (``validate``, ``plan``), :mod:`.run` (with the group
runners), :mod:`.copy`, :mod:`.offsets`; what they share is in :mod:`.common`; this module
builds the parser and runs ``main``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from collections.abc import Sequence

from .. import __version__
from ..connect.errors import ConnectException
from .common import (DEFAULT_KAFKA_TIMEOUT_S, DEFAULT_MASTER, MASTER_ENV, PROG, REMOTE_ENV, UserError, _err,
                     _LogFormatter, _scrub)
from .copy import cmd_copy
from .offsets import _DELETE_GIVEN_PARTITION, cmd_offsets, parse_assignment
from .plan import cmd_plan, cmd_validate
from .run import cmd_run

__all__ = ["UserError", "build_parser", "main", "parse_assignment"]


# ---------------------------------------------------------------------------------------------
# argument parsing and main


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return v


CONFIG_HELP = ("connector config: Kafka Connect JSON ({\"name\":..., \"config\":{...}}), a flat JSON/YAML "
               "mapping, a connector .properties file, inline JSON, or - for stdin")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Kafka Connect's standalone mode as bounded batch runs: validate and plan connector "
                    "configs, run each connector once (on Spark or in this process), inspect and change "
                    "committed source offsets.",
        epilog="Environment: COPYCAT_BOOTSTRAP_SERVERS, COPYCAT_OFFSET_STORAGE_TOPIC, ... override the worker "
               "file's keys; SPARK_REMOTE is run's and copy's default --remote, COPYCAT_SPARK_MASTER their "
               "default --master. "
               f"Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} (airflow-copycat) {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", default=False,
                        help="show tracebacks, INFO logs and spark-submit's output")
    parser.add_argument("--kafka-timeout", type=_seconds, default=DEFAULT_KAFKA_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to try to reach Kafka before giving up (default {DEFAULT_KAFKA_TIMEOUT_S:g})")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks, INFO logs and spark-submit's output")
    with_worker = argparse.ArgumentParser(add_help=False)
    with_worker.add_argument("-w", "--worker", metavar="WORKER",
                             help="Kafka Connect worker .properties file (bootstrap.servers, converters, "
                                  "offset.storage.topic or offset.storage.file.filename, producer.*, ...)")
    with_worker.add_argument("--kafka-timeout", type=_seconds, default=argparse.SUPPRESS, metavar="SECONDS",
                             help=f"how long to try to reach Kafka (default {DEFAULT_KAFKA_TIMEOUT_S:g})")

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("validate", parents=[common], help="check connector configs; never contacts Kafka",
                       description="Print every problem of each connector config (key, value given, why; "
                                   "secret values hidden). Exit 1 if any config is invalid. Contacts no "
                                   "external system.")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", parents=[common, with_worker], help="print a connector's plan (task groups) as JSON",
                       description="Validate CONFIG, list its partitions, split them into task configs and task "
                                   "groups and print the plan JSON (secret values hidden). Reads committed "
                                   "offsets; writes nothing.")
    p.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--max-tasks", type=_positive_int, metavar="N", help="overrides tasks.max")
    p.add_argument("--max-groups", type=_positive_int, metavar="N", help="overrides copycat.groups.max")
    p.add_argument("--previous", metavar="PLAN_JSON",
                   help="a plan printed earlier: partitions stay on the task they had (sticky)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", parents=[common, with_worker], help="one bounded run of each connector, in order",
                       description="Plan each connector, run every task group -- with spark-submit (default; "
                                   f"master from --master, ${MASTER_ENV} or {DEFAULT_MASTER}), over Spark Connect "
                                   f"(--remote or ${REMOTE_ENV}) or in this "
                                   "process (--in-process) -- commit offsets, and print what moved: records, "
                                   "bytes, errors, offsets before -> after per partition. All configs are "
                                   "validated before anything runs; a failed connector does not stop the "
                                   "next one. Exit 1 if any task failed.")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    _spark_options(p)
    p.add_argument("--json", action="store_true", help="print each connector's run summary as one JSON line")
    p.add_argument("--replay-dlq", action="store_true",
                   help="instead of each connector, replay its dead-letter queue (errors.deadletterqueue.topic.name) "
                        "through its current transforms and converters into the topic each record belongs to")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("copy", parents=[common, with_worker],
                       help="copy a file tree (Distcp): plan, copy in task groups, publish each dataset atomically",
                       description="List the datasets under source.url, diff them with target.url, copy what "
                                   "changed in task groups -- with spark-submit (default), over Spark Connect "
                                   "(--remote) or in this process (--in-process) -- into staging, and publish every dataset whose files all "
                                   "copied through its write-ahead log. A leftover log of an interrupted run is "
                                   "replayed first, and files staged by a failed run are reused. Prints a summary; "
                                   "exit 1 if any dataset was not published.")
    p.add_argument("config", metavar="CONFIG", help="the copy job: JSON, YAML or .properties (see docs/distcp.md)")
    _spark_options(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    p.set_defaults(func=cmd_copy)

    p = sub.add_parser("offsets", parents=[common, with_worker],
                       help="list, set or delete a connector's committed source offsets",
                       description="Without changes: print one JSON line per partition, "
                                   "{\"partition\": ..., \"offset\": ...} (every connector's, with a "
                                   "\"connector\" field, when CONNECTOR is omitted). --set and --delete write "
                                   "to the offset store the worker names (offset.storage.topic, or "
                                   "offset.storage.file.filename); the connector's next run starts there. "
                                   "Do not change offsets while the connector runs.")
    p.add_argument("connector", nargs="?", metavar="CONNECTOR",
                   help="connector name (or a connector config file to take the name from)")
    p.add_argument("--set", action="append", metavar="PARTITION=OFFSET",
                   help="write an offset; both JSON, e.g. '{\"filename\":\"/x.log\"}={\"position\":0}' "
                        "(repeatable; OFFSET null deletes)")
    p.add_argument("--delete", action="append", nargs="?", const=_DELETE_GIVEN_PARTITION, metavar="PARTITION",
                   help="delete a partition's offset (a tombstone): its next run starts from the beginning "
                        "(repeatable; bare --delete takes --partition)")
    p.add_argument("--partition", metavar="JSON", help="the partition to change, with --offset or --delete")
    p.add_argument("--offset", metavar="JSON", help="the offset to write for --partition")
    p.set_defaults(func=cmd_offsets)
    return parser


def _setup_logging(verbose: bool):
    logger = logging.getLogger("airflow_copycat")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogFormatter(verbose))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    previous_level = logger.level
    logger.addHandler(handler)
    if verbose and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)

    def restore():
        logger.removeHandler(handler)
        logger.setLevel(previous_level)

    return restore


def _spark_options(p: argparse.ArgumentParser) -> None:
    """How ``run`` and ``copy`` run their task groups."""
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--master", metavar="URL", help=f"Spark master for spark-submit (default ${MASTER_ENV} or "
                                                     f"{DEFAULT_MASTER})")
    mode.add_argument("--remote", metavar="sc://HOST:PORT",
                      help=f"run the task groups on a running Spark over Spark Connect, from this process, no "
                           f"spark-submit (default ${REMOTE_ENV} when set and --master is not given); the URL may "
                           f"add /;token=...;use_ssl=true")
    mode.add_argument("--in-process", action="store_true", help="run the tasks one by one in this process, no Spark")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting added to the defaults (repeatable; with --remote, Spark SQL "
                        "settings of the session)")
    p.add_argument("--max-tasks", type=_positive_int, metavar="N", help="overrides tasks.max")
    p.add_argument("--max-groups", type=_positive_int, metavar="N", help="overrides copycat.groups.max")
    p.add_argument("--work-dir", metavar="DIR",
                   help="where group and result JSON files go (kept): a local path or any fsspec URL, which the "
                        "Spark driver must reach (cluster deploy mode: a shared one); default a local temporary "
                        "directory (removed)")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``copycat`` console script. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    restore_logging = _setup_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        _err(f"{PROG}: interrupted")
        return 130
    except (UserError, ConnectException) as e:
        if args.verbose:
            _err(traceback.format_exc().rstrip())
        _err(f"{PROG}: error: {e}")
        return 1
    except Exception as e:  # noqa: BLE001 -- an unexpected failure: still one line, unless --verbose
        if args.verbose:
            _err(traceback.format_exc().rstrip())
        _err(f"{PROG}: error: {type(e).__name__}: {e}"
             + ("" if args.verbose else " (run with --verbose for the traceback)"))
        return 1
    finally:
        restore_logging()
        _scrub.clear()

