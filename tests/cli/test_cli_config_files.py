"""How the CLI reads a CONFIG argument it cannot parse: invalid YAML in a file or on standard input is
one line naming where the problem is -- never the offending line, which may hold a secret -- and
invalid JSON is one line too."""

from __future__ import annotations

import io

from airflow_copycat import cli

SECRET = "s3cr3t-value-never-printed"


def run_cli(capsys, *argv):
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_invalid_yaml_in_a_file_names_the_line_not_its_text(capsys, tmp_path):
    config = tmp_path / "copy.yaml"
    config.write_text(f"name: c\nsource.url: /src\ntarget.password: [{SECRET}\n")
    rc, out, err = run_cli(capsys, "copy", config, "--in-process")
    assert rc == 1
    assert f"{config}: cannot read the connector config: invalid YAML:" in err
    assert "at line 4, column 1" in err
    assert SECRET not in out + err
    assert "Traceback" not in out + err


def test_invalid_yaml_on_standard_input_names_the_line_not_its_text(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"name: c\nkey: {{{SECRET}\n"))
    rc, out, err = run_cli(capsys, "copy", "-", "--in-process")
    assert rc == 1
    assert "-: cannot read the connector config: invalid YAML:" in err
    assert SECRET not in out + err


def test_invalid_json_is_one_line(capsys, tmp_path):
    config = tmp_path / "copy.json"
    config.write_text('{"name": "c", "source.url": ')
    rc, out, err = run_cli(capsys, "copy", config, "--in-process")
    assert rc == 1
    assert err.strip().splitlines() == [f"copycat: error: {config}: cannot read the connector config: "
                                        "Expecting value: line 1 column 29 (char 28)"]
