"""AvroConverter without a registry, ``embedded.schema.format=single-object``: Avro's own single-object
encoding, checked against real other Avro implementations.

Java Avro (the avro jar of the pyspark wheel, driven by a small Java program through ``java`` of
``JAVA_HOME``) is the reference: its ``BinaryMessageDecoder`` decodes what the converter writes (and
re-encodes it with ``BinaryMessageEncoder`` to the very same bytes), its ``SchemaNormalization``
gives the same canonical form and fingerprint, and what its ``BinaryMessageEncoder`` writes (random
records of ``RandomData``) the converter reads. fastavro checks the canonical form and fingerprint too.
Schemas and values are generated (hypothesis).
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
from pathlib import Path

import fastavro
import fastavro.schema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect import ConfigException, DataException, Schema, SchemaBuilder, Struct
from airflow_copycat.converters.avro import single_object as avro_single_object
from airflow_copycat.converters.avro.converter import AvroConverter
from airflow_copycat.converters.avro.single_object import SchemaStore, fingerprint64, parsing_canonical_form
from airflow_copycat.testing.spark_connect import spark_home
from tests.support.avro_connectors import ORDER_V1, ORDER_V2, order
from tests.support.java import java_home

USER = (SchemaBuilder.struct().name("com.example.User")
        .field("id", Schema.INT64).field("name", Schema.STRING).build())
USER_V2 = (SchemaBuilder.struct().name("com.example.User")
           .field("id", Schema.INT64).field("name", Schema.STRING).field("email", Schema.OPTIONAL_STRING).build())

JAVA_SOURCE = """
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.avro.util.RandomData;
import java.io.*;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

/* One request per line, every field base64 but the numbers:
   D schema bytes...  -> canonical-form fingerprint64 reencoded...  (BinaryMessageDecoder, then BinaryMessageEncoder)
   R schema seed n    -> n records of RandomData, written by BinaryMessageEncoder */
public class SingleObject {
    static String b64(ByteBuffer bb) {
        byte[] b = new byte[bb.remaining()];
        bb.get(b);
        return Base64.getEncoder().encodeToString(b);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        PrintStream out = new PrintStream(System.out, true, "US-ASCII");
        Base64.Decoder dec64 = Base64.getDecoder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split(" ", -1);
            Schema schema = new Schema.Parser().parse(new String(dec64.decode(f[1]), StandardCharsets.UTF_8));
            BinaryMessageEncoder<Object> encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
            StringBuilder sb = new StringBuilder();
            if (f[0].equals("D")) {
                BinaryMessageDecoder<Object> decoder = new BinaryMessageDecoder<>(GenericData.get(), schema);
                sb.append(Base64.getEncoder().encodeToString(
                    SchemaNormalization.toParsingForm(schema).getBytes(StandardCharsets.UTF_8)));
                sb.append(' ').append(SchemaNormalization.parsingFingerprint64(schema));
                for (int i = 2; i < f.length; i++) {
                    sb.append(' ').append(b64(encoder.encode(decoder.decode(dec64.decode(f[i])))));
                }
            } else {
                sb.append('-');
                for (Object datum : new RandomData(schema, Integer.parseInt(f[3]), Long.parseLong(f[2]))) {
                    sb.append(' ').append(b64(encoder.encode(datum)));
                }
            }
            out.println(sb);
        }
    }
}
"""


def converter(is_key=False, **configs) -> AvroConverter:
    c = AvroConverter()
    c.configure({k.replace("_", "."): v for k, v in configs.items()}, is_key)
    return c


def writer_schema(schema: Schema) -> str:
    return AvroConverter()._data.writer(schema).schema_json


@pytest.fixture
def fresh_process(monkeypatch):
    """As in another process: no schema written by a converter of this one is known."""
    monkeypatch.setattr(avro_single_object, "WRITTEN", SchemaStore())
    import airflow_copycat.converters.avro.layouts as module

    monkeypatch.setattr(module, "WRITTEN", avro_single_object.WRITTEN)


def java(requests: list[str], work: Path) -> list[list[str]]:
    """The Java program's answer to each request line."""
    jars = sorted(str(p) for p in (spark_home() / "jars").glob("*.jar")
                  if p.name.startswith(("avro-1", "jackson-", "slf4j-api", "commons-compress", "commons-lang3")))
    assert any(Path(j).name.startswith("avro-1") for j in jars), f"no avro jar in {spark_home() / 'jars'}"
    source = work / "SingleObject.java"
    source.write_text(JAVA_SOURCE)
    proc = subprocess.run([str(Path(java_home()) / "bin" / "java"), "-cp", os.pathsep.join(jars), str(source)],
                          capture_output=True, timeout=300, input="".join(r + "\n" for r in requests).encode("ascii"))
    if proc.returncode and b"jdk.compiler" in proc.stderr:
        pytest.skip("this Java runtime has no compiler (jdk.compiler) to run the Avro program; a JDK has")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    lines = proc.stdout.decode("ascii").splitlines()
    assert len(lines) == len(requests)
    return [line.split(" ") for line in lines]


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


# ---------------------------------------------------------------- the bytes, by the specification

def test_single_object_records_are_the_documented_layout_and_round_trip(fresh_process):
    c = converter(embedded_schema_format="single-object")
    data = c.from_connect_data("t", ORDER_V2, order(4, 2))
    schema = json.loads(writer_schema(ORDER_V2))
    # an independent reading of the specification: fastavro's canonical form and fingerprint
    fp = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(schema), "CRC-64-AVRO")
    assert data[:2] == b"\xc3\x01" and data[2:10].hex() == fp
    plain = fastavro.schemaless_reader(io.BytesIO(data[10:]), fastavro.parse_schema(schema))
    assert plain["email"] == "u4@example.com" and plain["amount"].as_tuple().exponent == -2
    assert c.to_connect_data("t", data).value == order(4, 2)  # the writer knows its own schemas


def test_a_reader_knows_schemas_from_config_files_and_the_reader_schema(fresh_process, tmp_path):
    data = converter(embedded_schema_format="single-object").from_connect_data("t", ORDER_V1, order(3))
    v1 = writer_schema(ORDER_V1)
    assert converter(known_schemas=v1).to_connect_data("t", data).value == order(3)
    assert converter(known_schemas=json.dumps([json.loads(writer_schema(USER)), json.loads(v1)])) \
        .to_connect_data("t", data).value == order(3)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "order.avsc").write_text(json.dumps(json.loads(v1), indent=2))
    (tmp_path / "schemas" / "notes.txt").write_text("not a schema, not read")
    assert converter(known_schemas_files=str(tmp_path / "schemas")).to_connect_data("t", data).value == order(3)
    assert converter(known_schemas_files=str(tmp_path / "schemas" / "order.avsc")).to_connect_data("t", data) \
        .value == order(3)
    # the reader schema is known too: data written with it reads without more configuration
    old = converter(embedded_schema_format="single-object").from_connect_data("t", USER, Struct(USER, {"id": 1,
                                                                                                      "name": "a"}))
    fresh_process_reader = converter(reader_schema=writer_schema(USER))
    assert fresh_process_reader.to_connect_data("t", old).value == Struct(USER, {"id": 1, "name": "a"})


def test_an_unknown_fingerprint_is_a_data_exception_naming_it(fresh_process):
    data = converter(embedded_schema_format="single-object").from_connect_data("t", USER,
                                                                               Struct(USER, {"id": 1, "name": "a"}))
    avro_single_object.WRITTEN._d.clear()  # (the writer's process forgets too)
    with pytest.raises(DataException) as e:
        converter(known_schemas=writer_schema(USER_V2)).to_connect_data("my-topic", data)
    message = str(e.value)
    assert "topic my-topic" in message and data[2:10].hex() in message
    assert str(int.from_bytes(data[2:10], "little", signed=True)) in message  # as Java prints it
    assert "known.schemas" in message and "single-object" in message
    with pytest.raises(DataException, match="too short for Avro single-object encoding"):
        converter().to_connect_data("t", b"\xc3\x01\x00")


def test_schemas_written_in_this_process_are_known_to_its_other_converters():
    data = converter(embedded_schema_format="single-object").from_connect_data("t", USER,
                                                                               Struct(USER, {"id": 7, "name": "b"}))
    assert converter().to_connect_data("t", data).value == Struct(USER, {"id": 7, "name": "b"})


def test_every_layout_reads_whatever_the_writer_chose(fresh_process):
    """Old topics keep working: framed (0xC3 0x53) and container bytes read with a converter set to
    single-object, and single-object bytes with one left at the default."""
    value = Struct(USER_V2, {"id": 2, "name": "b", "email": "e"})
    layouts = {f: converter(embedded_schema_format=f).from_connect_data("t", USER_V2, value)
               for f in ("framed", "single-object", "container")}
    assert layouts["framed"][:2] == b"\xc3\x53" and layouts["container"][:4] == b"Obj\x01"
    for reader_format in ("framed", "single-object", "container"):
        reader = converter(embedded_schema_format=reader_format, known_schemas=writer_schema(USER_V2))
        for data in layouts.values():
            assert reader.to_connect_data("t", data).value == value
    # schema resolution as with the other layouts: old data read with the new schema
    old = converter(embedded_schema_format="single-object").from_connect_data("t", USER,
                                                                              Struct(USER, {"id": 1, "name": "a"}))
    as_new = converter(reader_schema=writer_schema(USER_V2), known_schemas=writer_schema(USER))
    assert as_new.to_connect_data("t", old).value == Struct(USER_V2, {"id": 1, "name": "a"})


def test_known_schemas_are_checked_at_configure(tmp_path):
    (tmp_path / "bad.avsc").write_text('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}')
    with pytest.raises(ConfigException) as e:
        converter(known_schemas="{not json", known_schemas_files=f"{tmp_path / 'missing.avsc'},{tmp_path / 'bad.avsc'}")
    message = str(e.value)
    assert "known.schemas" in message and "not JSON" in message
    assert "missing.avsc" in message and "cannot be read" in message
    assert "bad.avsc" in message and "not an Avro schema" in message
    with pytest.raises(ConfigException, match="embedded.schema.format"):
        converter(embedded_schema_format="single_object_v2")


# ---------------------------------------------------------------- against Java Avro and fastavro

def _scalar_kinds():
    return [
        (Schema.INT32, st.integers(-(2**31), 2**31 - 1)),
        (Schema.INT64, st.integers(-(2**63), 2**63 - 1)),
        (Schema.FLOAT64, st.floats(allow_nan=False)),
        (Schema.BOOLEAN, st.booleans()),
        (Schema.STRING, st.text(max_size=8)),
        (Schema.BYTES, st.binary(max_size=8)),
    ]


@st.composite
def _field(draw, depth: int, name: str):
    """(Connect schema, value strategy) of one field: scalars, optional scalars, arrays, maps of at most
    one entry (Java's decoder keeps maps in a HashMap: more entries may come back reordered), nested
    structs."""
    kinds = _scalar_kinds()
    shape = draw(st.sampled_from(["scalar", "optional", "array", "map"] + (["struct"] if depth < 2 else [])))
    schema, values = draw(st.sampled_from(kinds))
    if shape == "optional":
        optional = SchemaBuilder.type(schema.type).optional().build()
        return optional, st.one_of(st.none(), values)
    if shape == "array":
        return SchemaBuilder.array(schema).build(), st.lists(values, max_size=3)
    if shape == "map":
        return SchemaBuilder.map(Schema.STRING, schema).build(), st.dictionaries(st.text(max_size=4), values,
                                                                                   max_size=1)
    if shape == "struct":
        return draw(_struct(depth + 1, f"{name}_rec"))
    return schema, values


@st.composite
def _struct(draw, depth: int = 0, name: str = "Gen"):
    n = draw(st.integers(1, 4))
    fields = [(f"f{i}", *draw(_field(depth, f"{name}{i}"))) for i in range(n)]
    builder = SchemaBuilder.struct().name(f"gen.ns{draw(st.integers(0, 3))}.{name}")
    for fname, schema, _ in fields:
        builder.field(fname, schema)
    schema = builder.build()
    values = st.fixed_dictionaries({fname: v for fname, _, v in fields}).map(lambda d, s=schema: Struct(s, d))
    return schema, values


@st.composite
def _case(draw):
    schema, values = draw(_struct())
    return schema, draw(st.lists(values, min_size=1, max_size=3))


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(cases=st.lists(_case(), min_size=12, max_size=12))
def test_java_avro_reads_what_the_converter_writes_and_the_converter_reads_what_java_writes(
        tmp_path_factory, cases, monkeypatch):
    work = tmp_path_factory.mktemp("java")
    monkeypatch.setattr(avro_single_object, "WRITTEN", SchemaStore())
    import airflow_copycat.converters.avro.layouts as module

    monkeypatch.setattr(module, "WRITTEN", avro_single_object.WRITTEN)
    cases = [(ORDER_V2, [order(n, 2) for n in range(3)])] + cases  # decimals, timestamps, dates, times, int8
    writer = converter(embedded_schema_format="single-object")
    written = [[writer.from_connect_data("t", schema, v) for v in values] for schema, values in cases]
    texts = [writer_schema(schema) for schema, _ in cases]
    requests = [f"D {_b64(text.encode())} " + " ".join(_b64(d) for d in data) for text, data in zip(texts, written)]
    # Java's random records, for the schemas without Connect-only ranges (int8, timestamps): every Avro value fits
    randoms = [i for i, (schema, _) in enumerate(cases) if schema is not ORDER_V2]
    requests += [f"R {_b64(texts[i].encode())} {i} 4" for i in randoms]
    answers = java(requests, work)

    for (schema, values), text, data, answer in zip(cases, texts, written, answers):
        canonical, fp, *reencoded = answer
        # the same Parsing Canonical Form and fingerprint as Java's SchemaNormalization (and fastavro's)
        assert base64.b64decode(canonical).decode("utf-8") == parsing_canonical_form(text)
        assert fastavro.schema.to_parsing_canonical_form(json.loads(text)) == parsing_canonical_form(text)
        assert int(fp) == int.from_bytes(fingerprint64(parsing_canonical_form(text).encode()).to_bytes(8, "big"),
                                         "big", signed=True)
        # BinaryMessageDecoder read every record; BinaryMessageEncoder writes the very same bytes back
        assert [base64.b64decode(r) for r in reencoded] == data

    reader = converter(known_schemas=json.dumps([json.loads(t) for t in texts]))
    for i, answer in zip(randoms, answers[len(cases):]):
        schema = cases[i][0]
        assert answer[0] == "-" and len(answer) == 5
        for record in answer[1:]:
            data = base64.b64decode(record)
            read = reader.to_connect_data("t", data)
            assert read.schema == schema
            # written back by the converter: Java's bytes (the same fingerprint, the same encoding)
            assert writer.from_connect_data("t", read.schema, read.value) == data
