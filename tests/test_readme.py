"""The README stays a front page (at most 200 lines; the manual is docs/), its links lead to
files that exist, and the `make run` output it shows (and Getting started shows) is what the
demo set-up prints: it once listed two demo studies while `make run` printed three."""

import re
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The marker above the sample block, in the README and in Getting started.
MARKER = "<!-- demo-setup-output:"
# scripts/run.sh's default address, which the sample shows.
RUN_SITE_URL = "http://127.0.0.1:8000"


def _sample_block(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    assert MARKER in text, f"{path.name} has no demo set-up sample"
    after = text.split(MARKER, 1)[1].split("\n", 1)[1]
    match = re.match(r"```\n(.*?)```\n", after, re.S)
    assert match, f"{path.name}: the sample must be the fenced block right after the marker"
    return match.group(1)


def _normalised(output: str) -> str:
    """The printed set-up with what differs between runs put as the README writes it: each
    rater's secret token as `…`; and without the line that says espeak-ng is missing (it
    depends on the machine)."""
    lines = [re.sub(r"/enter/[^/\s]+/", "/enter/…/", line) for line in output.splitlines()
             if not line.startswith("espeak-ng is not installed")]
    return "\n".join(lines).strip() + "\n"


def test_the_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the rest into docs/"


def test_every_relative_link_of_the_readme_names_a_file_that_exists():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links to no page of the manual"
    assert [target for target in local if not (ROOT / target).exists()] == []


@pytest.mark.django_db
def test_the_sample_output_is_what_the_demo_set_up_prints(capsys, settings, tmp_path):
    settings.VAR_DIR, settings.MEDIA_ROOT = tmp_path, str(tmp_path / "media")
    call_command("demo_setup", "--base-url", RUN_SITE_URL)
    printed = _normalised(capsys.readouterr().out)
    assert printed.count("demo study ") >= 3  # the set-up really ran
    for page in (README, ROOT / "docs" / "getting-started.md"):
        assert _sample_block(page) == printed, (
            f"{page.relative_to(ROOT)}'s sample differs from what `make run` prints; "
            f"paste this:\n{printed}")
