"""Java SimpleDateFormat patterns (TimestampConverter ``format``, TimestampRouter ``timestamp.format``)
and Java regular expressions (RegexRouter, TopicNameMatches), as the transforms use them."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_copycat.transforms.dateformat import JavaDateFormat
from airflow_copycat.transforms.javaregex import JavaReplacement, compile_java

UTC = dt.timezone.utc
WHEN = dt.datetime(2024, 5, 1, 13, 5, 7, 42000, tzinfo=UTC)  # a Wednesday


@pytest.mark.parametrize("pattern, text", [
    ("yyyy-MM-dd HH:mm:ss.SSS", "2024-05-01 13:05:07.042"),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "2024-05-01T13:05:07.042Z"),
    ("yyyy-MM-dd'T'HH:mm:ssZ", "2024-05-01T13:05:07+0000"),
    ("yyyyMMdd", "20240501"),
    ("yy/M/d h:mm a", "24/5/1 1:05 PM"),
    ("EEE, d MMM yyyy HH:mm:ss z", "Wed, 1 May 2024 13:05:07 UTC"),
    ("EEEE MMMM dd", "Wednesday May 01"),
    ("D 'day of' yyyy, 'week' w, u", "122 day of 2024, week 18, 3"),
    ("k K G '''quoted'''", "13 1 AD 'quoted'"),
])
def test_formats_in_utc(pattern, text):
    assert JavaDateFormat(pattern).format(WHEN) == text


def test_formats_an_aware_datetime_in_utc_and_a_naive_one_as_utc():
    paris = dt.timezone(dt.timedelta(hours=2))
    fmt = JavaDateFormat("yyyy-MM-dd HH:mm")
    assert fmt.format(WHEN.astimezone(paris)) == "2024-05-01 13:05"
    assert fmt.format(WHEN.replace(tzinfo=None)) == "2024-05-01 13:05"


@pytest.mark.parametrize("pattern, text, expected", [
    ("yyyy-MM-dd HH:mm:ss.SSS", "2024-05-01 13:05:07.042", WHEN),
    ("yyyyMMddHHmmssSSS", "20240501130507042", WHEN),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "2024-05-01T15:05:07.042+02:00", WHEN),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSZ", "2024-05-01T08:05:07.042-0500", WHEN),
    ("dd MMM yyyy hh:mm:ss.SSS a", "01 may 2024 01:05:07.042 pm", WHEN),
    ("yyyy-MM-dd", "2024-05-01T13:05:07", dt.datetime(2024, 5, 1, tzinfo=UTC)),  # a prefix, as Java
    ("yyyy-MM-dd HH:mm z", "2024-05-01 15:05 Europe/Paris", WHEN.replace(second=0, microsecond=0)),
    ("yyyy DDD", "2024 122", dt.datetime(2024, 5, 1, tzinfo=UTC)),
    ("HH:mm", "13:05", dt.datetime(1970, 1, 1, 13, 5, tzinfo=UTC)),
])
def test_parses_to_utc(pattern, text, expected):
    assert JavaDateFormat(pattern).parse(text) == expected


def test_two_digit_years_land_within_80_years_before_and_20_after_now():
    year = JavaDateFormat("yy").parse(f"{(dt.date.today().year + 1) % 100:02d}").year
    assert year == dt.date.today().year + 1


@pytest.mark.parametrize("pattern, text", [("yyyy-MM-dd", "2024/05/01"), ("yyyy-MM-dd", "2024-13-01"),
                                           ("HH:mm z", "10:00 Mars/Olympus")])
def test_parse_errors(pattern, text):
    with pytest.raises(ValueError):
        JavaDateFormat(pattern).parse(text)


@pytest.mark.parametrize("pattern", ["yyyy-MM-dd Tq", "yyyy 'unterminated", "bad-format"])
def test_bad_patterns(pattern):
    with pytest.raises(ValueError, match="pattern"):
        JavaDateFormat(pattern)


def test_week_year_follows_us_weeks():
    assert JavaDateFormat("YYYY-ww").format(dt.datetime(2024, 12, 30)) == "2025-01"


def test_java_regex_named_groups_and_quoting():
    regex = compile_java(r"(?<db>\w+)\Q.*\E(?<rest>.*)")
    m = regex.fullmatch("sales.*orders")
    assert m.group("db") == "sales" and m.group("rest") == "orders"
    assert compile_java(r"(?<=a)b").search("ab")  # a lookbehind is not a named group


def test_java_replacement_takes_the_longest_existing_group_number():
    regex = compile_java("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)")
    assert JavaReplacement("$11-$1", regex).replace_first(regex, "abcdefghijk") == "k-a"
    regex = compile_java("(a)")
    assert JavaReplacement("$10", regex).replace_first(regex, "a") == "a0"


def test_java_replacement_of_an_unmatched_group_is_empty():
    regex = compile_java("(a)|(b)")
    assert JavaReplacement("[$1$2]", regex).replace_first(regex, "b") == "[b]"
