"""README stays true: its configuration reference is generated from the ConfigDefs."""

from pathlib import Path

from scripts.config_docs import END, START, reference

ROOT = Path(__file__).resolve().parent.parent


def test_readme_config_reference_is_current():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    current = readme.split(START, 1)[1].split(END, 1)[0].strip()
    assert current == reference().strip(), "run: python scripts/config_docs.py --write README.md"


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text(encoding="utf-8")[:1500]
    assert "make demo" in head and "make test" in head
