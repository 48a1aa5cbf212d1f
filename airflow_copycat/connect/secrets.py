"""Secrets: which config keys hold one, and the one way every layer keeps their values out of text.

The package keeps secret values out of what it writes in the first place: plans, XCom, group files and
task configs read ``[hidden]`` (:data:`HIDDEN`) where a secret was, and a config problem about a secret
key shows ``[hidden]`` as its value. What is left is text the package does not write itself -- a
driver's or a client's exception, a validator's message -- and that goes through a :class:`Scrubber`
before it reaches a log, an error or XCom. (The Airflow layer also registers each secret with Airflow's
own secrets masker, which hides it in task logs as ``***``.)

A scrubber replaces each secret value it holds, and the forms a value takes inside other text (escaped
inside JSON, percent-encoded inside a URL), and every ``scheme://user:password@`` or ``?password=``
password of a URL:

* a value of :data:`WHOLE_WORD_BELOW` characters or more wherever it occurs;
* a shorter one only as a whole word, not inside a longer run of letters, digits and ``_``: with
  ``database.password=postgres`` the class ``io.debezium.connector.postgresql.PostgresConnector``
  stays readable, while ``postgres`` after ``password=``, in quotes or between ``:`` and ``@`` is
  hidden. A short secret written glued to other letters (``xpostgresx``) is not recognised there:
  short passwords are weak ones, and hiding every occurrence of a dictionary word garbled messages;
* nothing for a value under :data:`MIN_LENGTH` characters: in free text it would hide words like
  ``a`` or ``on`` (the package still writes ``[hidden]`` for it wherever it writes the config).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable
from urllib.parse import quote, unquote

HIDDEN = "[hidden]"
"""What a secret value reads as in plans, XCom, task configs, messages and logs."""

WHOLE_WORD_BELOW = 12
"""Secrets shorter than this are only hidden as whole words (see the module docstring)."""

MIN_LENGTH = 4
"""Secrets shorter than this are not looked for in free text (see the module docstring)."""

# besides copycat's own, every name Airflow's masker hides by (DEFAULT_SENSITIVE_FIELDS: passphrase,
# authorization, bearer, dsn, connection_string, proxy, webhook_url...), so a key Airflow masks in a log
# is never shown in a plan; and a name ending in "key" (client.key, hmac.signing.key, s3.sse.customer.key)
_SECRET_KEY = re.compile(
    r"password|passwd|pwd|passphrase|secret|token|credential|jaas|private|key\.pem|access[._]?key|account[._]?key"
    r"|api[._]?key|oauthbearer\.config|store\.options|user[._]?info|authorization|auth[._]?header|bearer|dsn"
    r"|connection[._]?string|webhook[._]?url|proxy|service[._]?(?:key|account)|keyfile|(?:^|[._])key$",
    re.IGNORECASE,
)

# scheme://user:password@host: the password runs to the last @ before the host (a raw @ or / in it
# must not cut it short), so all of it is hidden; the user name ends at the first ':' and may be empty
# (scheme://:password@host: the driver's default user). In a list of URLs ("...@h1,https://...@h2", or
# separated by spaces) each URL is its own. An empty password (user:@host) is no secret. In a config
# value the password may hold spaces (drivers accept them); in free text a space ends it.
_URL_USER = r"(://[^/:\s]*:)"
_NOT_NEXT_URL = r"(?![,\s][A-Za-z][A-Za-z0-9+.-]*://)"
_URL_PASSWORD = re.compile(_URL_USER + r"((?!@)(?:" + _NOT_NEXT_URL + r"[^\r\n])+)(@)")
_URL_PASSWORD_IN_TEXT = re.compile(_URL_USER + r"((?!@)(?:" + _NOT_NEXT_URL + r"\S)+)(@)")
# a secret in a URL's query string: jdbc:postgresql://h/db?user=u&password=p (Confluent's usual form), and
# any parameter named like one (libpq's sslpassword, a driver's api_key or token)
_QUERY_KEY = (r"([?&;](?:[A-Za-z0-9_.-]*?(?:password|passwd|pwd|secret|token|passphrase|api_?key|credentials?)"
              r"|sig)=)")  # sig: an Azure SAS signature
# in a config value the secret runs to the next parameter; in free text (a log line, JSON) it also ends at
# a quote, a backslash escape counting as part of it (a JSON-escaped quote inside the secret)
_QUERY_PASSWORD = re.compile(_QUERY_KEY + r"([^&;#\s]+)", re.IGNORECASE)
_QUERY_PASSWORD_IN_TEXT = re.compile(_QUERY_KEY + r"((?:\\.|[^&;#\s\"'\\])+)", re.IGNORECASE)
_WORD = r"[A-Za-z0-9_]"


def is_secret_key(key: str) -> bool:
    """Whether a config key's value must be hidden by its name alone (passwords, tokens, JAAS configs,
    storage options); connectors' ``PASSWORD`` keys are secret whatever their name."""
    return bool(_SECRET_KEY.search(key))


def hide_url_passwords(text: str, *, in_text: bool = False) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL and the value of every
    query parameter named like a secret (``password``, ``pwd``, ``sslpassword``, ``token``, ``api_key``...)
    read as :data:`HIDDEN`. ``text`` is one config value (a URL) unless ``in_text``: free text, where a
    query value also ends at a quote (a URL inside JSON or a quoted log line)."""
    text = (_URL_PASSWORD_IN_TEXT if in_text else _URL_PASSWORD).sub(lambda m: m.group(1) + HIDDEN + m.group(3), text)
    return (_QUERY_PASSWORD_IN_TEXT if in_text else _QUERY_PASSWORD).sub(lambda m: m.group(1) + HIDDEN, text)


def url_passwords(value: Any) -> list[str]:
    """The passwords (and secret query values) of the URLs in the config value ``value``, as written and
    percent-decoded: the parts :func:`hide_url_passwords` hides, to be looked for on their own in text
    that quotes them outside their URL (a driver's message, Airflow's rendered fields). ``[]`` for a
    value that is not text or holds no URL password."""
    if not isinstance(value, str):
        return []
    found = [m.group(2) for m in _URL_PASSWORD.finditer(value)] + [m.group(2) for m in _QUERY_PASSWORD.finditer(value)]
    return list(dict.fromkeys(found + [unquote(p) for p in found]))


def has_url_password(value: Any) -> bool:
    """Whether ``value`` is text holding a URL with a password (see :func:`hide_url_passwords`)."""
    return isinstance(value, str) and bool(_URL_PASSWORD.search(value) or _QUERY_PASSWORD.search(value))


class Scrubber:
    """Secret values, and :meth:`__call__` to hide them in text (see the module docstring).

    Add values as they become known (:meth:`add`); ``None``, values under :data:`MIN_LENGTH` characters
    and :data:`HIDDEN` itself are ignored. A ``Password`` (or anything with a ``value`` attribute) is added by its value,
    a value holding a URL password also by that password (:func:`url_passwords`)."""

    def __init__(self, values: Iterable[Any] = ()):
        self._values: set[str] = set()
        self._pattern: re.Pattern | None = None
        for v in values:
            self.add(v)

    def add(self, value: Any) -> None:
        value = getattr(value, "value", value)
        if value in (None, "") or value == HIDDEN or len(str(value)) < MIN_LENGTH:
            return
        text = str(value)
        forms = {text, json.dumps(text)[1:-1], quote(text, safe="")}
        for password in url_passwords(text):  # quoted on its own, or its URL in a form the patterns miss
            if password != text:
                self.add(password)
        if not forms <= self._values:
            self._values |= forms
            self._pattern = None

    def clear(self) -> None:
        """Forget every value."""
        self._values.clear()
        self._pattern = None

    def __bool__(self) -> bool:
        return bool(self._values)

    def _compiled(self) -> re.Pattern | None:
        if self._pattern is None and self._values:
            alternatives = []
            for v in sorted(self._values, key=len, reverse=True):  # longest first: no partial hiding
                escaped = re.escape(v)
                if len(v) < WHOLE_WORD_BELOW:
                    escaped = f"(?<!{_WORD}){escaped}(?!{_WORD})"
                alternatives.append(escaped)
            self._pattern = re.compile("|".join(alternatives))
        return self._pattern

    def __call__(self, text: Any) -> str:
        """``text`` (made a string) with the secrets and URL passwords hidden."""
        text = str(text)
        pattern = self._compiled()
        if pattern is not None:
            text = pattern.sub(HIDDEN, text)
        return hide_url_passwords(text, in_text=True)


def scrub(text: Any, values: Iterable[Any]) -> str:
    """``text`` with ``values`` and URL passwords hidden: one :class:`Scrubber` call."""
    return Scrubber(values)(text)
