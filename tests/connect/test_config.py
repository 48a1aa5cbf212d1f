"""ConfigDef: typed keys, every problem at once, secrets never shown."""

from __future__ import annotations

import json

import pytest

from airflow_copycat.connect.config import (
    ConfigDef, ConfigProblem, ConfigType, Password, convert, in_range, non_empty, one_of, valid_regex,
)
from airflow_copycat.connect.errors import ConfigException

SECRET = "hunter2-s3cr3t"


def jdbc_def() -> ConfigDef:
    return (
        ConfigDef()
        .define("topic", ConfigType.STRING, doc="the topic to write to")
        .define("tasks.max", ConfigType.INT, 1, in_range(1, 100))
        .define("ratio", ConfigType.DOUBLE, 0.5)
        .define("enabled", ConfigType.BOOLEAN, True)
        .define("tables", ConfigType.LIST, [], non_empty)
        .define("connection.password", ConfigType.PASSWORD)
        .define("mode", ConfigType.STRING, "bulk", one_of("bulk", "incrementing"))
        .define("table.pattern", ConfigType.STRING, ".*", valid_regex)
    )


# ----------------------------------------------------------------- every problem at once

def test_every_problem_is_reported_with_key_value_and_why():
    raw = {"tasks.max": "0", "ratio": "x", "enabled": "maybe", "tables": "", "connection.password": SECRET,
           "mode": "stream", "table.pattern": "("}
    with pytest.raises(ConfigException) as err:
        jdbc_def().parse(raw, context="jdbc-source")
    problems = {p.key: p for p in err.value.problems}
    assert set(problems) == {"topic", "tasks.max", "ratio", "enabled", "tables", "mode", "table.pattern"}
    assert problems["topic"] == ConfigProblem("topic", None, "is required (the topic to write to)")
    assert problems["tasks.max"] == ConfigProblem("tasks.max", "0", "must be at least 1")
    assert problems["ratio"].value == "x" and "expected a number" in problems["ratio"].message
    assert problems["enabled"].value == "maybe" and "true or false" in problems["enabled"].message
    assert problems["tables"].message == "must not be empty"
    assert problems["mode"].message == "must be one of bulk, incrementing"
    assert "not a valid regular expression" in problems["table.pattern"].message
    message = str(err.value)
    assert message.startswith("Invalid configuration for jdbc-source: 7 problem(s)")
    assert "  - topic=(absent): is required" in message
    assert "  - tasks.max='0': must be at least 1" in message
    assert err.value.context == "jdbc-source"


def test_validate_returns_problems_without_raising():
    assert jdbc_def().validate({"topic": "t", "tables": "a", "connection.password": "p"}) == []
    assert [p.key for p in jdbc_def().validate({"tables": "a", "connection.password": "p", "ratio": "?"})] == [
        "topic", "ratio"]


def test_a_crashing_validator_still_names_its_key():
    def boom(key, value):
        raise RuntimeError("cannot reach the catalog")

    d = ConfigDef().define("catalog", ConfigType.STRING, "x", boom).define("n", ConfigType.INT, 1, in_range(2))
    with pytest.raises(ConfigException) as err:
        d.parse({})
    assert [(p.key, p.message) for p in err.value.problems] == [
        ("catalog", "could not be validated: cannot reach the catalog"), ("n", "must be at least 2")]


# ----------------------------------------------------------------- secrets

def test_password_value_is_never_shown():
    d = jdbc_def()
    with pytest.raises(ConfigException) as err:
        d.parse({"connection.password": SECRET})  # topic and tables missing: an exception is raised
    assert SECRET not in str(err.value) and SECRET not in repr(err.value)

    values = d.parse({"topic": "t", "tables": "a", "connection.password": SECRET})
    password = values["connection.password"]
    assert password.value == SECRET
    for shown in (repr(values), str(values), repr(password), str(password), f"{password}", "%s" % password,
                  json.dumps(password)):
        assert SECRET not in shown


def test_password_hidden_even_when_a_validator_quotes_it():
    def strong(key, value):
        return None if len(value) > 20 else f"password {value!r} is too short"

    def crashes(key, value):
        int(value)  # ValueError: invalid literal for int() with base 10: '<the secret>'

    for validator in (strong, crashes):
        d = ConfigDef().define("pw", ConfigType.PASSWORD, validator=validator)
        with pytest.raises(ConfigException) as err:
            d.parse({"pw": SECRET})
        problem = err.value.problems[0]
        assert problem.key == "pw" and problem.value == "[hidden]"
        assert SECRET not in str(err.value) and SECRET not in repr(err.value.problems)
        assert "[hidden]" in problem.message


def test_password_default_hidden_in_describe():
    d = ConfigDef().define("pw", ConfigType.PASSWORD, SECRET)
    assert d.describe()[0]["default"] == "[hidden]"
    assert d.secret_keys() == {"pw"}


def test_a_changed_password_compares_unequal():
    # both hide as "[hidden]"; comparing must still see the values (config-change detection)
    assert Password(SECRET) == Password(SECRET)
    assert Password(SECRET) != Password("other")
    assert not (Password(SECRET) != Password(SECRET))


# ----------------------------------------------------------------- conversions

@pytest.mark.parametrize("type_,raw,expected", [
    (ConfigType.INT, "42", 42), (ConfigType.INT, " 7 ", 7), (ConfigType.INT, 7.0, 7), (ConfigType.LONG, "9223372036854775807", 2**63 - 1),
    (ConfigType.DOUBLE, "1.5", 1.5), (ConfigType.DOUBLE, "1e3", 1000.0), (ConfigType.DOUBLE, 2, 2.0),
    (ConfigType.BOOLEAN, "true", True), (ConfigType.BOOLEAN, "FALSE", False), (ConfigType.BOOLEAN, " True ", True),
    (ConfigType.BOOLEAN, False, False),
    (ConfigType.LIST, "a, b,,c", ["a", "b", "c"]), (ConfigType.LIST, ["x ", " y"], ["x", "y"]), (ConfigType.LIST, "", []),
    (ConfigType.STRING, 5, "5"), (ConfigType.CLASS, "org.apache.kafka.connect.json.JsonConverter",
                                  "org.apache.kafka.connect.json.JsonConverter"),
])
def test_conversions_from_strings(type_, raw, expected):
    value = convert(type_, raw)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("type_,raw,why", [
    (ConfigType.INT, "1.5", "expected an integer, got '1.5'"), (ConfigType.INT, True, "got a boolean"),
    (ConfigType.INT, 7.5, "expected an integer"), (ConfigType.DOUBLE, "fast", "expected a number"),
    (ConfigType.BOOLEAN, "2", "expected true or false"), (ConfigType.STRING, {"a": 1}, "expected a string"),
])
def test_conversion_errors_say_why(type_, raw, why):
    with pytest.raises(ValueError, match=why):
        convert(type_, raw)


def test_parse_fills_defaults_and_keeps_unknown_keys():
    values = jdbc_def().parse({"topic": "t", "tables": "a,b", "connection.password": "p", "tasks.max": "",
                               "mode": "INCREMENTING", "key.converter": "x"})
    assert values["tasks.max"] == 1  # empty string from a .properties file: the default
    assert (values["ratio"], values["enabled"], values["mode"]) == (0.5, True, "INCREMENTING")
    assert values["tables"] == ["a", "b"]
    assert values["key.converter"] == "x"  # passed through for other layers


def test_required_int_given_empty_is_reported_missing():
    d = ConfigDef().define("port", ConfigType.INT)
    with pytest.raises(ConfigException, match="port=\\(absent\\): is required"):
        d.parse({"port": ""})


def test_merge_lets_the_second_definition_win():
    a = ConfigDef().define("x", ConfigType.INT, 1).define("y", ConfigType.STRING, "a")
    b = ConfigDef().define("x", ConfigType.INT, 2)
    assert a.merge(b).parse({}) == {"x": 2, "y": "a"}
    assert a.parse({}) == {"x": 1, "y": "a"}  # a itself is unchanged
