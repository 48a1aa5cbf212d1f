"""The one way secrets are kept out of text (airflow_copycat.connect.secrets)."""

from __future__ import annotations

import json
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_copycat.connect.config import ConfigDef, ConfigType
from airflow_copycat.connect.secrets import HIDDEN, MIN_LENGTH, WHOLE_WORD_BELOW, Scrubber, scrub


def test_a_short_password_is_hidden_as_a_word_and_leaves_other_words_alone():
    text = ("io.debezium.connector.postgresql.PostgresConnector: connection to postgres:5432 failed for "
            "user=replicator password=postgres ('postgres'), dsn postgresql://replicator:postgres@db/postgres")
    out = scrub(text, ["postgres"])
    assert out.startswith("io.debezium.connector.postgresql.PostgresConnector: ")
    assert "password=[hidden] ('[hidden]')" in out
    assert "replicator:[hidden]@db" in out
    assert "postgresql://" in out


def test_a_long_secret_is_hidden_wherever_it_occurs():
    secret = "s3cr3t-T0ken-abcdef"
    assert len(secret) >= WHOLE_WORD_BELOW
    out = scrub(f"prefix{secret}suffix and {secret}", [secret])
    assert secret not in out and out == f"prefix{HIDDEN}suffix and {HIDDEN}"


def test_the_forms_a_secret_takes_inside_json_and_urls_are_hidden():
    secret = 'pa"ss/wo rd\\x'
    text = json.dumps({"password": secret}) + " " + f"https://u:{quote(secret, safe='')}@host/db"
    out = Scrubber([secret])(text)
    assert json.dumps(secret)[1:-1] not in out and quote(secret, safe="") not in out
    assert out.count(HIDDEN) == 2


def test_url_and_query_passwords_are_hidden_without_being_told():
    out = scrub("jdbc:postgresql://h/db?user=u&password=hunter22 and mysql://root:pw@h:3306/x", [])
    assert "hunter22" not in out and ":pw@" not in out and "root:[hidden]@h" in out


def test_values_too_short_for_free_text_and_hidden_markers_are_ignored():
    s = Scrubber(["abc", None, "", HIDDEN, "x" * (MIN_LENGTH - 1)])
    assert not s and s("a b abc on") == "a b abc on"


def test_a_validators_message_never_quotes_the_secret_and_keeps_other_words():
    config = ConfigDef().define(
        "database.password", ConfigType.PASSWORD,
        validator=lambda key, value: f"{value!r} is refused by the postgresql server at postgres:5432")
    _, problems = config._parse({"database.password": "postgres"})
    (problem,) = problems
    assert problem.message == "'[hidden]' is refused by the postgresql server at [hidden]:5432"
    assert problem.value == HIDDEN


@settings(max_examples=300, deadline=None)
@given(secret=st.text(min_size=MIN_LENGTH, max_size=30).filter(lambda s: s.strip() == s and s),
       before=st.text(max_size=20), after=st.text(max_size=20))
def test_a_secret_between_non_word_characters_or_long_enough_never_survives(secret, before, after):
    """Generated secrets and surroundings: the secret is gone from the output whenever it stands
    between non-word characters (or is long enough to be hidden anywhere)."""
    sep = " "
    text = before + sep + secret + sep + after
    out = scrub(text, [secret])
    assert sep + secret + sep not in out
    if len(secret) >= WHOLE_WORD_BELOW:
        assert secret not in out.replace(HIDDEN, "\0")


def test_query_parameters_named_like_secrets_are_hidden_in_plans_and_restored_for_the_run():
    from airflow_copycat.runtime.connector_config import redact, restore_secrets

    url = "postgresql+psycopg://db:5432/shop?sslmode=verify-full&sslpassword=KeyPass-42&application_name=copycat"
    raw = {"connection.url": url, "table.whitelist": "orders"}
    secrets: set[str] = set()
    shown = redact(raw, secrets)
    assert "KeyPass-42" not in str(shown) and "sslpassword=[hidden]&application_name=copycat" in shown["connection.url"]
    assert secrets == {"connection.url"} and restore_secrets(shown, raw) == raw
    assert scrub(f"could not connect to {url}", []) == f"could not connect to {shown['connection.url']}"


def test_a_url_inside_json_or_quotes_loses_only_its_secret():
    """The URL ends at a quote: hiding its token must not swallow the rest of a JSON document or log line."""
    doc = json.dumps({"mode": "Spark Connect sc://localhost:15002/;token=abc123", "duration_s": 0.2})
    shown = scrub(doc, [])
    assert json.loads(shown) == {"mode": "Spark Connect sc://localhost:15002/;token=[hidden]", "duration_s": 0.2}
    assert scrub("remote 'sc://h:1/;token=tok1' failed", []) == "remote 'sc://h:1/;token=[hidden]' failed"


def test_a_secret_query_value_is_hidden_whole_in_a_config_value_and_up_to_its_quote_in_text():
    from airflow_copycat.runtime.connector_config import redact

    url = "jdbc:mysql://h/db?password=pa'ss\\\\w\"d&ssl=1"
    assert redact({"connection.url": url}, set())["connection.url"] == "jdbc:mysql://h/db?password=[hidden]&ssl=1"
    # inside JSON the value's escaped quote and backslash are part of it; the document's quote ends it
    escaped = "jdbc:mysql://h/db?password=pass\\\\w\"d&ssl=1"
    assert json.loads(scrub(json.dumps({"u": escaped}), [])) == {"u": "jdbc:mysql://h/db?password=[hidden]&ssl=1"}
    # a raw quote in free text may end the URL: a secret the scrubber knows is hidden whole wherever it is
    shown = scrub(f"connect to '{url}'", ["pa'ss\\\\w\"d"])
    assert "pa'ss" not in shown and 'w"d' not in shown and shown.endswith("password=[hidden]&ssl=1'")
    assert scrub("https://acct.blob.core.windows.net/c?sv=2024&sig=AbC%2B&design=x", []) == \
        "https://acct.blob.core.windows.net/c?sv=2024&sig=[hidden]&design=x"
