"""The docs stay true: the configuration reference is generated from the ConfigDefs; README is the door."""

from pathlib import Path

from scripts.config_docs import END, START, reference

ROOT = Path(__file__).resolve().parent.parent


def test_the_config_reference_is_current():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    current = page.split(START, 1)[1].split(END, 1)[0].strip()
    assert current == reference().strip(), "run: python scripts/config_docs.py --write docs/configuration.md"


def test_every_relative_link_of_the_docs_leads_to_a_file_and_heading_that_exist():
    """README and docs/*.md link to each other's sections: each such link must lead somewhere."""
    import re

    def anchors(path: Path) -> set[str]:
        text, fence, out = path.read_text(encoding="utf-8"), False, set()
        for line in text.split("\n"):
            fence = fence != line.startswith("```")
            m = re.match(r"^#{1,6} (.*)$", line)
            if m and not fence:
                out.add(re.sub(r"[^\w\- ]", "", re.sub(r"[`*_]", "", m.group(1).strip().lower())).replace(" ", "-"))
        return out

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        fence = False
        for line in page.read_text(encoding="utf-8").split("\n"):
            fence = fence != line.startswith("```")
            for target in ([] if fence else re.findall(r"\]\(([^)\s]+)\)", line)):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if not dest.exists() or anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text(encoding="utf-8")[:1500]
    assert "make demo" in head and "make test" in head
