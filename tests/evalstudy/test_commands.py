"""The command-line tools, end to end: import, export round trip, design CSV, demo set-up."""

import csv
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.models import Judgment
from evalstudy.models import ItemMedia, Rater, Study

DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.mark.django_db
def test_import_study_open_and_export_design(tmp_path, capsys):
    call_command("import_study", str(DEMO / "asr_meaning.yaml"), "--open")
    assert "created study asr-meaning-demo" in capsys.readouterr().out
    study = Study.objects.get(slug="asr-meaning-demo")
    assert study.status == Study.Status.OPEN
    out = tmp_path / "design.csv"
    call_command("export_design", study.slug, "--csv", str(out))
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0])[:5] == ["list", "position", "item", "system", "kind"]
    targets = [row for row in rows if row["kind"] == "target"]
    # 36 items x 3 systems, 2 ratings per output
    assert len(targets) == 36 * 3 * 2
    per_output = {}
    for row in targets:
        per_output[(row["item"], row["system"])] = per_output.get((row["item"], row["system"]),
                                                                  0) + 1
    assert len(per_output) == 108 and set(per_output.values()) == {2}
    assert {row["kind"] for row in rows} == {"calibration", "target", "attention"}
    for seat in {row["list"] for row in rows}:
        items = [r["item"] for r in targets if r["list"] == seat]
        assert len(items) == len(set(items)) == 12


@pytest.mark.django_db
def test_reimport_is_safe_and_export_round_trips(tmp_path, capsys):
    spec = str(DEMO / "summary_preference.yaml")
    call_command("import_study", spec)
    call_command("import_study", spec)
    assert "unchanged study summary-preference-demo" in capsys.readouterr().out
    exported = tmp_path / "out.yaml"
    call_command("export_study", "summary-preference-demo", "-o", str(exported))
    document = yaml.safe_load(exported.read_text())
    document["study"]["slug"] = "copy"
    copy = tmp_path / "copy.json"
    copy.write_text(__import__("json").dumps(document))
    call_command("import_study", str(copy))
    again = tmp_path / "again.yaml"
    call_command("export_study", "copy", "-o", str(again))
    assert yaml.safe_load(again.read_text()) == document


@pytest.mark.django_db
def test_import_study_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "study:\n  slug: ok\n  title: T\nsystems:\n  - name: a\n  - name: b\n"
        "criteria:\n  - key: q\n    kind: binary\n    prompt: ok?\n"
        "items:\n  - id: i1\n    outputs: {a: x}\n"
    )
    with pytest.raises(CommandError) as error:
        call_command("import_study", str(bad))
    assert f"{bad}:12: items[0].outputs: no output for system 'b'" in str(error.value)
    assert not Study.objects.exists()


@pytest.mark.django_db
def test_missing_file_and_unknown_study_are_clear_errors(tmp_path):
    with pytest.raises(CommandError, match=r"nope.yaml: cannot read"):
        call_command("import_study", str(tmp_path / "nope.yaml"))
    with pytest.raises(CommandError, match="no study with slug 'ghost'"):
        call_command("export_design", "ghost")


@pytest.mark.django_db
def test_import_items_and_judgments_from_files(tmp_path, capsys):
    spec = DEMO / "asr_meaning.yaml"
    call_command("import_study", str(spec))
    items = tmp_path / "more.jsonl"
    items.write_text(
        '{"id": "extra-1", "reference": "call me later", "metadata": {"speaker": "spk09"}, '
        '"outputs": {"asr-small": "call me ladder", "asr-medium": "call me later", '
        '"asr-large": "call me later"}}\n'
    )
    call_command("import_items", str(items), "--study", "asr-meaning-demo")
    assert "wrote 1 items and 3 outputs" in capsys.readouterr().out
    judgments = tmp_path / "ratings.csv"
    judgments.write_text(
        "rater,item,system,criterion,value,rater_kind\n"
        "slp-a,extra-1,asr-small,severity,1,slp\n"
        "slp-a,extra-1,asr-small,usable,yes,slp\n"
        "slp-b,extra-1,asr-small,severity,2,slp\n"
    )
    call_command("import_judgments", str(judgments), "--study", "asr-meaning-demo")
    assert "3 judgments created" in capsys.readouterr().out
    assert Rater.objects.filter(kind="slp").count() == 2
    call_command("import_judgments", str(judgments), "--study", "asr-meaning-demo")
    assert "0 judgments created, 0 revised, 3 unchanged" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("rater,item,system,criterion,value\nx,extra-1,asr-small,severity,9\n")
    with pytest.raises(CommandError, match=r"bad.csv:2: value: criterion 'severity'"):
        call_command("import_judgments", str(bad), "--study", "asr-meaning-demo")
    assert Judgment.objects.count() == 3


@pytest.mark.django_db
def test_demo_setup_is_idempotent_and_prints_links(capsys, settings, tmp_path):
    settings.VAR_DIR, settings.MEDIA_ROOT = tmp_path, str(tmp_path / "media")
    call_command("demo_setup", "--base-url", "http://demo.test")
    first = capsys.readouterr().out
    call_command("demo_setup", "--base-url", "http://demo.test")
    second = capsys.readouterr().out
    assert "http://demo.test/enter/" in first
    assert first.count("/enter/") == 6
    assert Study.objects.filter(status=Study.Status.OPEN).count() == 3
    # 2 personal-link raters per study (their links work in that study only) + 1 account
    assert Rater.objects.count() == 7
    assert Rater.objects.filter(user__username="slp").get().enrollments.count() == 3
    # The audio demo: a checked recording per item (speech from espeak-ng, else tones).
    listening = Study.objects.get(slug="asr-listening-demo")
    assert listening.media_must_finish and listening.media_max_plays == 3
    assert sorted(ItemMedia.objects.filter(item__study=listening).values_list(
        "item__external_id", "mime")) == [(f"rec-0{n}", "audio/wav") for n in range(1, 5)]
    assert "/accounts/login/" in first and "'slp'" in first
    assert "unchanged" in second
    links = [line.split()[-1] for line in first.splitlines() if "/enter/" in line]
    assert links == [line.split()[-1] for line in second.splitlines() if "/enter/" in line]
    # The seats it reports are the ones the admin's study list shows.
    import re

    from django.test import Client
    admin = Client()
    admin.login(username="researcher", password="researcher-demo")
    listing = admin.get("/admin/evalstudy/study/").content.decode()
    shown = dict(re.findall(r'<a href="/admin/evalstudy/study/\d+/change/">([\w-]+)</a>.*?'
                            r'<td class="field-seats">(\d+)</td>', listing, re.S))
    printed = dict(re.findall(r"demo study ([\w-]+): created, open, (\d+) seats", first))
    assert printed and shown == printed
