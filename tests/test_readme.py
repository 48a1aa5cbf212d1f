"""The docs stay true: the configuration reference is generated from the ConfigDefs; README is the door."""

from pathlib import Path

from scripts.config_docs import END, START, reference

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
"""The pages a reader navigates: README, docs/*.md and the benchmarks' README."""


def test_the_config_reference_is_current():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    current = page.split(START, 1)[1].split(END, 1)[0].strip()
    assert current == reference().strip(), "run: python scripts/config_docs.py --write docs/configuration.md"


def test_every_relative_link_of_the_docs_leads_to_a_file_and_heading_that_exist():
    """README, docs/*.md and bench/README.md link to each other's sections and pictures: each such
    link must lead somewhere."""
    import re

    def anchors(path: Path) -> set[str]:
        text, fence, out = path.read_text(encoding="utf-8"), False, set()
        for line in text.split("\n"):
            fence = fence != line.startswith("```")
            m = re.match(r"^#{1,6} (.*)$", line)
            if m and not fence:
                out.add(re.sub(r"[^\w\- ]", "", re.sub(r"[`*_]", "", m.group(1).strip().lower())).replace(" ", "-"))
        return out

    broken = []
    for page in PAGES:
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


def test_every_picture_of_the_docs_exists_has_alt_text_and_is_shown_somewhere():
    """Pictures (``![alt](path)``) in the pages: the file exists, is a PNG or an SVG (XML) as its name
    says, and the alt text says what it shows; every file of docs/images is shown by some page, so
    none is left behind when a page stops showing it."""
    import re
    import xml.etree.ElementTree as ET

    shown, problems = set(), []
    for page in PAGES:
        fence = False
        for line in page.read_text(encoding="utf-8").split("\n"):
            fence = fence != line.lstrip().startswith("```")
            for alt, target in ([] if fence else re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", line)):
                where = f"{page.relative_to(ROOT)}: {target}"
                dest = (page.parent / target).resolve()
                if re.match(r"^[a-z]+:", target) or not dest.is_file():
                    problems.append(f"{where}: not a file of the repository")
                    continue
                shown.add(dest)
                if len(alt.split()) < 4:
                    problems.append(f"{where}: alt text {alt!r} does not say what the picture shows")
                if dest.suffix == ".png" and not dest.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"):
                    problems.append(f"{where}: not a PNG")
                if dest.suffix == ".svg" and ET.parse(dest).getroot().tag != "{http://www.w3.org/2000/svg}svg":
                    problems.append(f"{where}: not an SVG document")
    # a link to a picture without showing it (``[the chart](images/bench.svg)``) is fine, but counts as shown
    for page in PAGES:
        for target in re.findall(r"(?<!!)\[[^\]]*\]\(([^)\s#]+\.(?:png|svg))\)", page.read_text(encoding="utf-8")):
            shown.add((page.parent / target).resolve())
    images = {p.resolve() for p in (ROOT / "docs" / "images").iterdir() if p.suffix in (".png", ".svg")}
    problems += [f"docs/images/{p.name}: no page shows it" for p in sorted(images - shown)]
    assert not problems, problems
    assert {p.name for p in images} >= {"graph-task-group.png", "run-summary-xcom.png", "backfill-dialog.png",
                                        "offsets-page.png", "bench.svg"}
