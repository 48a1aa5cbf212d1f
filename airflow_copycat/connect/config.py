"""Config definitions: typed keys with defaults, docs and validators.

A connector declares its keys once in a :class:`ConfigDef`; ``ConfigDef.parse``
turns raw string/any values into typed ones and raises a single
:class:`~airflow_copycat.connect.errors.ConfigException` listing *every* problem
(key, value given, why) -- never just the first. Values of ``PASSWORD`` keys are
never shown in problems or ``repr``.

Raw configs are flat dicts of string keys, as in Kafka Connect; values may be
strings (from ``.properties`` files) or already typed (from JSON/YAML).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping

from .errors import ConfigException
from .secrets import scrub

NO_DEFAULT = object()
"""Marks a key as required: ``parse`` reports it when absent."""


class ConfigType(str, Enum):
    STRING = "string"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    LIST = "list"
    PASSWORD = "password"
    CLASS = "class"


class Password(str):
    """A secret string: behaves as ``str`` but its ``repr``/``str`` hide the value.
    ``.value`` returns it."""

    def __new__(cls, value: str):
        obj = super().__new__(cls, "[hidden]")
        obj._value = value
        return obj

    @property
    def value(self) -> str:
        return self._value

    def __repr__(self):
        return "Password([hidden])"

    def __eq__(self, other):
        return isinstance(other, Password) and other._value == self._value

    def __ne__(self, other):  # else str.__ne__ compares "[hidden]" with "[hidden]"
        return not self == other

    def __hash__(self):
        return hash(self._value)


@dataclass(frozen=True)
class ConfigProblem:
    """One problem with one key: ``key``, the ``value`` given (``None`` when absent;
    ``"[hidden]"`` for secrets) and ``message`` saying why."""

    key: str
    value: Any
    message: str

    def __str__(self):
        shown = "(absent)" if self.value is None else repr(self.value)
        return f"{self.key}={shown}: {self.message}"


Validator = Callable[[str, Any], "str | None"]
"""A validator gets (key, typed value) and returns ``None`` when fine or a message saying why not."""


def in_range(lo: float | None = None, hi: float | None = None) -> Validator:
    def check(key, v):
        if v is None:
            return None
        if lo is not None and v < lo:
            return f"must be at least {lo}"
        if hi is not None and v > hi:
            return f"must be at most {hi}"
        return None

    check.describe = f"[{'' if lo is None else lo}..{'' if hi is None else hi}]"
    return check


def one_of(*choices: str, case_sensitive: bool = False) -> Validator:
    norm = (lambda s: s) if case_sensitive else (lambda s: s.lower())
    allowed = {norm(c) for c in choices}

    def check(key, v):
        if v is None or norm(str(v)) in allowed:
            return None
        return "must be one of " + ", ".join(choices)

    check.describe = "one of " + ", ".join(choices)
    return check


def non_empty(key, v):
    if v is None or (isinstance(v, (str, list)) and len(v) == 0):
        return "must not be empty"
    return None


def valid_regex(key, v):
    if v is None:
        return None
    try:
        re.compile(v)
    except re.error as e:
        return f"is not a valid regular expression: {e}"
    return None


@dataclass
class ConfigKey:
    name: str
    type: ConfigType
    default: Any = NO_DEFAULT
    validator: Validator | None = None
    importance: str = "medium"
    doc: str = ""
    group: str | None = None

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT


@dataclass
class ConfigDef:
    """An ordered set of :class:`ConfigKey`. Chain ``define`` calls to build one."""

    keys: dict[str, ConfigKey] = field(default_factory=dict)
    allow_unknown: bool = True
    """Kafka Connect passes unknown keys through (other layers read them); ``parse`` keeps them as given."""

    def define(
        self,
        name: str,
        type: ConfigType | str,
        default: Any = NO_DEFAULT,
        validator: Validator | None = None,
        importance: str = "medium",
        doc: str = "",
        group: str | None = None,
    ) -> "ConfigDef":
        self.keys[name] = ConfigKey(name, ConfigType(type), default, validator, importance, doc, group)
        return self

    def merge(self, other: "ConfigDef") -> "ConfigDef":
        """A new ConfigDef with the keys of both (``other`` wins on clashes)."""
        merged = ConfigDef(dict(self.keys), self.allow_unknown and other.allow_unknown)
        merged.keys.update(other.keys)
        return merged

    def secret_keys(self) -> set[str]:
        return {k.name for k in self.keys.values() if k.type is ConfigType.PASSWORD}

    def validate(self, raw: Mapping[str, Any]) -> list[ConfigProblem]:
        """Every problem with ``raw``; an empty list when it is valid."""
        return self._parse(raw)[1]

    def parse(self, raw: Mapping[str, Any], *, context: str | None = None) -> dict[str, Any]:
        """Typed values for every defined key (defaults filled in) plus unknown keys as given.

        Raises :class:`ConfigException` listing every problem.
        """
        values, problems = self._parse(raw)
        if problems:
            raise ConfigException(problems, context=context)
        return values

    def _parse(self, raw: Mapping[str, Any]):
        values: dict[str, Any] = {} if not self.allow_unknown else {
            k: v for k, v in raw.items() if k not in self.keys
        }
        problems: list[ConfigProblem] = []
        for key in self.keys.values():
            given = raw.get(key.name)
            shown = "[hidden]" if key.type is ConfigType.PASSWORD and given is not None else given
            if given is None or (isinstance(given, str) and given == "" and key.type is not ConfigType.STRING and key.type is not ConfigType.PASSWORD and key.type is not ConfigType.LIST):
                if key.required:
                    problems.append(ConfigProblem(key.name, None, "is required" + (f" ({key.doc})" if key.doc else "")))
                    continue
                value = key.default
                if value is not None:
                    try:
                        value = convert(key.type, value)
                    except ValueError:
                        pass
            else:
                try:
                    value = convert(key.type, given)
                except ValueError as e:
                    problems.append(ConfigProblem(key.name, shown, str(e)))
                    continue
            if key.validator is not None:
                try:
                    message = key.validator(key.name, value.value if isinstance(value, Password) else value)
                except Exception as e:  # a validator that crashes still names the key
                    message = f"could not be validated: {e}"
                if message and isinstance(value, Password) and value.value:
                    # a validator's message (or its exception's) may quote the secret
                    message = scrub(message, [value.value])
                if message:
                    problems.append(ConfigProblem(key.name, shown, message))
                    continue
            values[key.name] = value
        return values, problems

    def describe(self) -> list[dict]:
        """The keys as rows (name, type, default, importance, doc) for docs and ``copycat validate``."""
        return [
            {
                "name": k.name,
                "type": k.type.value,
                "default": None if k.required or k.default is None else (k.default if k.type is not ConfigType.PASSWORD else "[hidden]"),
                "required": k.required,
                "importance": k.importance,
                "valid": getattr(k.validator, "describe", None),
                "doc": k.doc,
            }
            for k in self.keys.values()
        ]


_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def convert(type: ConfigType, value: Any) -> Any:
    """Convert a raw value to ``type``; raises ``ValueError`` with a readable message."""
    if type in (ConfigType.INT, ConfigType.LONG):
        if isinstance(value, bool):
            raise ValueError("expected an integer, got a boolean")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {value!r}") from None
    if type is ConfigType.DOUBLE:
        if isinstance(value, bool):
            raise ValueError("expected a number, got a boolean")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None
    if type is ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    if type is ConfigType.LIST:
        if isinstance(value, (list, tuple)):
            return [str(v).strip() for v in value if str(v).strip()]
        return [part.strip() for part in str(value).split(",") if part.strip()]
    if type is ConfigType.PASSWORD:
        return value if isinstance(value, Password) else Password(str(value))
    if type in (ConfigType.STRING, ConfigType.CLASS):
        if isinstance(value, (dict, list)):
            raise ValueError(f"expected a string, got a {value.__class__.__name__}")
        return str(value)
    raise ValueError(f"unknown config type {type}")

