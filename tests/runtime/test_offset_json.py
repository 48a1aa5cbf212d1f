"""Offset topic keys and values are the bytes Kafka Connect's workers write: a differential test
against Jackson itself (the jackson-databind of the pyspark wheel, driven by a small Java program
through ``java`` of ``JAVA_HOME``), over generated partitions and offsets.

Kafka Connect writes offsets with its JsonConverter without schemas, which hands a ``JsonNode`` to
Jackson's ``ObjectMapper``; here each generated value goes to Java as JSON text, is read into a
``JsonNode`` and written back by ``ObjectMapper.writeValueAsBytes``, and must equal what
``offset_key`` / ``offset_value`` write. Floats are generated with few significant digits (what
offsets hold: seconds, ratios): JDK 17's ``Double.toString`` prints those as JDK 19+ does (full
precision doubles may differ between the two JDKs, see ``converters/json_converter.py``).
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from airflow_copycat.runtime.offsets import offset_key, offset_value
from airflow_copycat.testing.spark_connect import spark_home
from tests.support.java import java_home

ROOT = Path(__file__).resolve().parents[2]
JAVA_SOURCE = """
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

public class JacksonOffsets {
    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        PrintStream out = new PrintStream(System.out, true, "US-ASCII");
        for (String line; (line = in.readLine()) != null; ) {
            out.println(Base64.getEncoder().encodeToString(mapper.writeValueAsBytes(mapper.readTree(line))));
        }
    }
}
"""
CHARS = ([chr(c) for c in range(0x20)] + ['"', "\\", "/", "\x7f", "\u00e9", "\u4e2d", "\u2028", "\u2029", "\ue000",
         "\uffff", "\U0001f600", "\U00010000", "\U0010ffff", "a", "Z", "0", " ", "{", ":", ","])


def _java() -> str:
    return str(Path(java_home()) / "bin" / "java")


def jackson(values: list, work: Path) -> list[bytes]:
    """What Jackson's ObjectMapper writes for each value (sent as ASCII JSON text, one per line)."""
    jars = sorted(str(p) for p in (spark_home() / "jars").glob("jackson-*.jar"))
    assert any("jackson-databind" in j for j in jars), f"no jackson-databind in {spark_home() / 'jars'}"
    source = work / "JacksonOffsets.java"
    source.write_text(JAVA_SOURCE)
    proc = subprocess.run([_java(), "-cp", os.pathsep.join(jars), str(source)], capture_output=True, timeout=300,
                          input="".join(json.dumps(v) + "\n" for v in values).encode("ascii"))
    if proc.returncode and b"jdk.compiler" in proc.stderr:
        pytest.skip("this Java runtime has no compiler (jdk.compiler) to run the Jackson program; a JDK has")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return [base64.b64decode(line) for line in proc.stdout.decode("ascii").split()]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 8)))


def _scalar(rng: random.Random):
    kind = rng.randrange(6)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.choice([0, -1, 1, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63, rng.randint(-10**12, 10**12)])
    if kind == 2:  # few significant digits, any magnitude: 1.0E10, 0.001, 1.25E-5, 1234567.0
        return float(f"{rng.randint(-99999, 99999)}e{rng.randint(-12, 12)}")
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    return rng.choice([0.0, -0.0, 1.0, 0.1, 1e7, 9999999.0, 1e-3, 9.99e-4])


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(4 if depth < 3 else 1)
    if kind == 0:
        return _scalar(rng)
    if kind == 1:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_offset_keys_and_values_are_the_bytes_kafka_connect_writes(tmp_path):
    # Given generated source partitions and offsets: strings with every control character, quotes,
    # backslashes, characters beyond U+FFFF, integers at the 32- and 64-bit edges, floats, nesting
    rng = random.Random(20261124)
    partitions = [{_text(rng): _value(rng) for _ in range(rng.randint(1, 3))} for _ in range(600)]
    offsets = [_value(rng) for _ in range(600)]
    names = [_text(rng) or "connector" for _ in range(600)]
    # When Kafka Connect's JSON (Jackson) and this worker write them
    keys = [[n, p] for n, p in zip(names, partitions)]
    expected = jackson(keys + [o for o in offsets if o is not None], tmp_path)
    # Then the bytes are the same, key by key and value by value
    ours = [offset_key(n, p) for n, p in zip(names, partitions)] + [offset_value(o) for o in offsets if o is not None]
    assert len(expected) == len(ours)
    mismatches = [(i, (keys + offsets)[i] if i < len(keys) else None, e, o)
                  for i, (e, o) in enumerate(zip(expected, ours)) if e != o]
    assert not mismatches, mismatches[:5]
    assert any(b"\\uD83D\\uDE00" in k for k in ours) and any(b"\\u001F" in k for k in ours)  # the edges came up
