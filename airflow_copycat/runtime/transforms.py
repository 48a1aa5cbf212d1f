"""The transform chain of a connector: Kafka Connect's ``transforms=`` and ``predicates=`` keys.

::

    transforms=addSource,dropTombstones
    transforms.addSource.type=org.apache.kafka.connect.transforms.InsertField$Value
    transforms.addSource.topic.field=source_topic
    transforms.dropTombstones.type=Filter
    transforms.dropTombstones.predicate=isTombstone
    predicates=isTombstone
    predicates.isTombstone.type=RecordIsTombstone

``transforms`` lists aliases in the order they apply; ``transforms.<alias>.type``
names the class and the other ``transforms.<alias>.*`` keys (prefix removed)
configure it, except ``predicate`` (apply only to records for which that
predicate tests true) and ``negate`` (``true``: only to those testing false).
``predicates`` / ``predicates.<name>.*`` define predicates the same way.

A ``type`` is a Kafka Connect class name
(``org.apache.kafka.connect.transforms.ReplaceField$Value``,
``org.apache.kafka.connect.transforms.predicates.TopicNameMatches``), its short
form (``ReplaceField$Value``, ``ReplaceField.Value``, ``TopicNameMatches``), one
of our classes (``module:Class``, ``module.Class``), or a third-party transform
or predicate registered in the entry-point group ``airflow_copycat.transforms``
(by entry-point name or value).

:func:`check_transforms` reports every problem of these keys without raising;
:func:`build_chain` raises one :class:`ConfigException` listing them, or returns
the configured :class:`TransformChain` the source and sink loops apply to each record.
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from ..connect.config import ConfigProblem, ConfigType, convert
from ..connect.errors import ConfigException, ConnectException
from ..connect.records import ConnectRecord
from ..connect.transforms import Predicate, Transformation
from . import plugins

TRANSFORM_ENTRY_POINT_GROUP = "airflow_copycat.transforms"

log = logging.getLogger("airflow_copycat.transforms")

_BUILTIN_MODULES = ("fields", "mask", "extract_hoist", "flatten", "cast", "timestamps", "routing", "headers",
                    "metadata", "filter", "predicates", "debezium")
_STAGE_KEYS = frozenset({"type", "predicate", "negate"})


class TransformError(ConnectException):
    """A transform (or its predicate) raised on a record. ``transform_alias`` is its alias in
    ``transforms=``, ``class_name`` its Kafka Connect class name (or ``module.Class`` for
    one of ours); the original exception is ``__cause__``."""

    def __init__(self, message: str, *, transform_alias: str, class_name: str):
        super().__init__(message)
        self.transform_alias = transform_alias
        self.class_name = class_name


@dataclass(frozen=True)
class _Stage:
    alias: str
    transform: Transformation
    class_name: str
    predicate: Predicate | None = None
    predicate_alias: str | None = None
    negate: bool = False


class TransformChain:
    """The configured transforms of one task, applied in order. Not thread-safe: one per task."""

    def __init__(self, stages: tuple[_Stage, ...] = (), predicates: tuple[Predicate, ...] = ()):
        self._stages = tuple(stages)
        self._predicates = tuple(predicates)
        self._closed = False

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        """``record`` after every transform whose predicate (if any, negated if asked) holds;
        ``None`` as soon as one drops it. Raises :class:`TransformError` naming the transform
        when a transform or its predicate raises."""
        for stage in self._stages:
            try:
                if stage.predicate is not None and bool(stage.predicate.test(record)) == stage.negate:
                    continue
            except Exception as e:
                raise TransformError(
                    f"predicate {stage.predicate_alias!r} of transform {stage.alias!r} ({stage.class_name}) failed: "
                    f"{type(e).__name__}: {e}", transform_alias=stage.alias, class_name=stage.class_name) from e
            try:
                record = stage.transform.apply(record)
            except Exception as e:
                raise TransformError(
                    f"transform {stage.alias!r} ({stage.class_name}) failed: {type(e).__name__}: {e}",
                    transform_alias=stage.alias, class_name=stage.class_name) from e
            if record is None:
                return None
        return record

    def close(self) -> None:
        """Close every transform and predicate once; a failing ``close`` is logged, not raised."""
        if self._closed:
            return
        self._closed = True
        for name, obj in [(s.alias, s.transform) for s in self._stages] + [("predicate", p) for p in self._predicates]:
            try:
                obj.close()
            except Exception:
                log.warning("closing %s (%s) failed", name, type(obj).__qualname__, exc_info=True)

    def __bool__(self) -> bool:
        return bool(self._stages)

    def __len__(self) -> int:
        return len(self._stages)

    def __repr__(self) -> str:
        return "TransformChain(" + ", ".join(
            s.alias + (f" if {'not ' if s.negate else ''}{s.predicate_alias}" if s.predicate else "")
            for s in self._stages) + ")"


def check_transforms(raw: Mapping[str, Any]) -> list[ConfigProblem]:
    """Every problem of the ``transforms``/``predicates`` keys of connector config ``raw``
    (``[]`` when there are none or all is well). Never raises."""
    chain, problems = _build(raw)
    chain.close()
    return problems


def build_chain(config: Mapping[str, Any]) -> TransformChain:
    """The configured chain of connector config ``config`` (empty, and false, when it has no
    transforms). Raises :class:`ConfigException` listing every problem."""
    chain, problems = _build(config)
    if problems:
        chain.close()
        name = config.get("name")
        raise ConfigException(problems, context=f"transforms of connector {name!r}" if name else "transforms")
    return chain


# ------------------------------------------------------------------------------------- building


def _build(raw: Mapping[str, Any]) -> tuple[TransformChain, list[ConfigProblem]]:
    problems: list[ConfigProblem] = []
    predicate_problems: list[ConfigProblem] = []  # reported after the transforms'
    transform_aliases = _aliases(raw, "transforms", problems)
    predicate_aliases = _aliases(raw, "predicates", predicate_problems)
    predicates: dict[str, Predicate] = {}
    for alias in predicate_aliases:
        made = _make(raw, "predicates", alias, Predicate, predicate_problems)
        if made is not None:
            predicates[alias] = made[0]
    stages: list[_Stage] = []
    for alias in transform_aliases:
        prefix = f"transforms.{alias}."
        made = _make(raw, "transforms", alias, Transformation, problems)
        predicate_alias = raw.get(prefix + "predicate")
        predicate_alias = None if predicate_alias is None or str(predicate_alias).strip() == "" \
            else str(predicate_alias).strip()
        negate_given = raw.get(prefix + "negate")
        negate = False
        if negate_given is not None and str(negate_given).strip() != "":
            try:
                negate = convert(ConfigType.BOOLEAN, negate_given)
            except ValueError as e:
                problems.append(ConfigProblem(prefix + "negate", negate_given, str(e)))
            if predicate_alias is None:
                problems.append(ConfigProblem(
                    prefix + "negate", negate_given,
                    f"is set but {prefix}predicate is not: negate inverts a predicate's test; "
                    f"set {prefix}predicate or remove {prefix}negate"))
        if predicate_alias is not None and predicate_alias not in predicate_aliases:
            defined = ", ".join(predicate_aliases) or "none"
            problems.append(ConfigProblem(
                prefix + "predicate", predicate_alias,
                f"refers to predicate {predicate_alias!r}, which is not defined (predicates: {defined}): "
                f"add it to predicates and set predicates.{predicate_alias}.type"))
        if made is not None:
            transform, class_name = made
            stages.append(_Stage(alias, transform, class_name, predicates.get(predicate_alias),
                                 predicate_alias, negate))
    return TransformChain(tuple(stages), tuple(predicates.values())), problems + predicate_problems


def _aliases(raw: Mapping[str, Any], key: str, problems: list[ConfigProblem]) -> list[str]:
    given = raw.get(key)
    if given is None or given == "" or given == []:
        return []
    try:
        aliases = convert(ConfigType.LIST, given)
    except ValueError as e:
        problems.append(ConfigProblem(key, given, str(e)))
        return []
    seen: list[str] = []
    for alias in aliases:
        if alias in seen:
            problems.append(ConfigProblem(key, given, f"lists {alias!r} twice: give each {key[:-1]} a unique alias"))
        else:
            seen.append(alias)
    return seen


def _make(raw: Mapping[str, Any], list_key: str, alias: str, kind: type, problems: list[ConfigProblem]):
    """(configured instance, class name) of ``<list_key>.<alias>``, or ``None`` after adding its problems."""
    prefix = f"{list_key}.{alias}."
    type_key = prefix + "type"
    what = "transform" if kind is Transformation else "predicate"
    name = raw.get(type_key)
    if name is None or str(name).strip() == "":
        example = ("org.apache.kafka.connect.transforms.InsertField$Value" if kind is Transformation
                   else "org.apache.kafka.connect.transforms.predicates.TopicNameMatches")
        problems.append(ConfigProblem(type_key, None, f"is required: the class of {what} {alias!r} listed in "
                                                      f"{list_key} (e.g. {example})"))
        return None
    name = str(name).strip()
    try:
        cls = resolve(name, kind)
    except ConnectException as e:
        problems.append(ConfigProblem(type_key, name, str(e)))
        return None
    configs = {k[len(prefix):]: v for k, v in raw.items()
               if k.startswith(prefix) and k[len(prefix):] not in _STAGE_KEYS}
    try:
        instance = cls()
        instance.configure(configs)
    except ConfigException as e:
        problems.extend(ConfigProblem(prefix + p.key, p.value, p.message) for p in e.problems)
        return None
    except Exception as e:
        problems.append(ConfigProblem(type_key, name, f"{what} {alias!r} could not be configured: "
                                                      f"{type(e).__name__}: {e}"))
        return None
    return instance, getattr(cls, "kafka_class", None) or f"{cls.__module__}.{cls.__qualname__}"


# ----------------------------------------------------------------------------------- resolving


@functools.lru_cache(maxsize=1)
def _builtins() -> tuple[dict[str, type], dict[str, type]]:
    """(class by every accepted name, base class with Key/Value variants by its names)."""
    by_name: dict[str, type] = {}
    with_variants: dict[str, type] = {}
    for module_name in _BUILTIN_MODULES:
        module = importlib.import_module(f"airflow_copycat.transforms.{module_name}")
        for obj in list(vars(module).values()):
            if not isinstance(obj, type) or obj.__module__ != module.__name__:
                continue
            if "Key" in vars(obj) and "Value" in vars(obj):
                short = obj.Value.kafka_class.rsplit("$", 1)[0]
                with_variants[short] = with_variants[short.rsplit(".", 1)[-1]] = obj
                classes = [obj.Key, obj.Value]
            elif issubclass(obj, (Transformation, Predicate)) and obj.kafka_class:
                classes = [obj]
            else:
                continue
            for cls in classes:
                short = cls.kafka_class.rsplit(".", 1)[-1]
                for alias in (cls.kafka_class, short, short.replace("$", ".")):
                    by_name[alias] = cls
    return by_name, with_variants


def resolve(name: str, kind: type = Transformation) -> type:
    """The transform (``kind=Transformation``) or predicate (``kind=Predicate``) class called
    ``name``; :class:`ConnectException` saying what was tried."""
    what = "transform" if kind is Transformation else "predicate"
    by_name, with_variants = _builtins()
    cls = by_name.get(name)
    if cls is None and name in with_variants:
        raise ConnectException(f"{what} {name!r} comes in two variants: use {name}$Key for the record key or "
                               f"{name}$Value for the value")
    if cls is None:
        from importlib.metadata import entry_points  # only here: its import is costly

        for ep in entry_points(group=TRANSFORM_ENTRY_POINT_GROUP):
            if name in (ep.name, ep.value, ep.value.replace(":", ".")):
                try:
                    cls = ep.load()
                except Exception as e:
                    raise ConnectException(f"{what} plugin {name!r} (entry point {ep.value!r}) failed to load: "
                                           f"{type(e).__name__}: {e}") from None
                break
    if cls is None:
        try:
            cls = _import(name)
        except (ImportError, AttributeError, ValueError) as e:
            known = sorted(n for n, c in by_name.items() if "." not in n and issubclass(c, kind))
            raise ConnectException(
                f"unknown {what} class {name!r}: not a built-in ({', '.join(known)}), not a plugin in "
                f"entry-point group {TRANSFORM_ENTRY_POINT_GROUP!r}, and not importable ({e})"
            ) from None
    if not (isinstance(cls, type) and issubclass(cls, kind)):
        other = Predicate if kind is Transformation else Transformation
        if isinstance(cls, type) and issubclass(cls, other):
            hint = ("it is a predicate: define it under predicates.<name>.type and refer to it with "
                    "transforms.<alias>.predicate" if kind is Transformation
                    else "it is a transform: list it in transforms")
            raise ConnectException(f"{name!r} is not a {what}: {hint}")
        raise ConnectException(f"{name!r} is not a {what}: expected a subclass of "
                               f"airflow_copycat.connect.transforms.{kind.__name__}, got {cls!r}")
    return cls


def _import(path: str):
    """``module:Class.Inner`` or ``module.Class.Inner``: the longest importable module prefix."""
    if ":" in path:
        return plugins._import(path)
    parts = path.split(".")
    error: Exception | None = None
    for i in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not (module_name + ".").startswith(e.name + "."):
                raise  # the module exists but one of its own imports is missing
            error = error or e
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(str(error) if error else f"{path!r} is not a module path")
