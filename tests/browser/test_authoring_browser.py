"""Authoring in the admin, in Chromium at 1366x768: the study change page fits the screen, and
the items grid takes a block pasted from a spreadsheet, saves it and shows the result; both
pages pass axe-core."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from evalstudy.models import Criterion, Item, Output
from tests.browser.test_accessibility_browser import assert_accessible
from tests.factories import UserFactory, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def signed_in_page(live_server, new_page, client):
    researcher = UserFactory(username="author", is_staff=True, is_superuser=True)
    client.force_login(researcher)
    page = new_page(width=1366, height=768)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])
    return page


def test_study_change_page_fits_1366px(live_server, new_page, shot, client):
    study = make_study(n_items=2, n_systems=3, attention_check_every=2)
    page = signed_in_page(live_server, new_page, client)
    page.goto(f"{live_server.url}/admin/evalstudy/study/{study.pk}/change/")
    expect(page.get_by_role("link", name="Edit items in a grid")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    shot(page, "32-study-admin")


def test_items_grid_paste_edit_save(live_server, new_page, shot, client):
    study = make_study(n_items=2, n_systems=2)
    page = signed_in_page(live_server, new_page, client)
    page.goto(f"{live_server.url}/admin/evalstudy/study/{study.pk}/items-grid/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    assert_accessible(page, "items grid")
    # Edit one cell by typing.
    cell = page.get_by_label("Row 1, Output: sys-1")
    cell.fill("typed by hand")
    # Paste three spreadsheet rows (item, reference, context, outputs) into row 3.
    page.get_by_label("Row 3, Item id").focus()
    page.evaluate("""() => {
        const box = document.activeElement;
        const data = new DataTransfer();
        data.setData("text/plain", "pasted-1\\tref one\\t\\tA one\\tB one\\n"
                                   + "pasted-2\\tref two\\t\\tA two\\tB two\\n"
                                   + "pasted-3\\tref three\\t\\tA three\\tB three\\n");
        box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true,
                                                       cancelable: true}));
    }""")
    expect(page.get_by_label("Row 5, Output: sys-1")).to_have_value("B three")  # a row added
    page.get_by_role("button", name="Add a row").click()
    page.get_by_role("button", name="Save items").click()
    expect(page.locator(".messagelist")).to_contain_text(
        "Saved: 3 items and 7 outputs written, 0 items removed.")
    expect(page.get_by_label("Row 5, Output: sys-0")).to_have_value("A three")
    assert Output.objects.get(item__external_id="item-000", system__name="sys-1").text == (
        "typed by hand")
    assert Item.objects.filter(study=study).count() == 5
    # A row with an error: nothing saved, the row and column named.
    page.get_by_label("Row 6, Item id").fill("half")
    page.get_by_label("Row 6, Output: sys-0").fill("only A")
    page.get_by_role("button", name="Save items").click()
    expect(page.locator("#grid-problems")).to_contain_text(
        "row 6, outputs: no output for system 'sys-1'")
    assert not Item.objects.filter(external_id="half").exists()
    assert_accessible(page, "items grid with an error")
    shot(page, "33-items-grid")


def test_scale_labels_are_edited_as_rows_and_saved(live_server, new_page, shot, client):
    """The structured fields are rows of inputs (no `key = value` typing): change a label,
    add an anchor, remove one, save; the stored labels are exactly what the rows said."""
    study = make_study(n_items=2, n_systems=2)
    Criterion.objects.filter(study=study, key="usable").update(
        kind="likert", scale_points=5, options=[], labels={"1": "no", "5": "yes"})
    page = signed_in_page(live_server, new_page, client)
    page.goto(f"{live_server.url}/admin/evalstudy/study/{study.pk}/change/")
    expect(page.get_by_label("Labels of usable, row 2: label")).to_have_value("yes")
    page.get_by_label("Labels of usable, row 2: label").fill("excellent")
    page.get_by_role("button", name="Add a row to Labels of usable").click()
    page.get_by_label("Labels of usable, row 3: Point (optional)").fill("3")
    page.get_by_label("Labels of usable, row 3: label").fill("middling = fair")
    page.get_by_role("button", name="Remove row 1 of Labels of usable").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    # The admin's own tabular inlines have unlabelled inputs (Django's, not ours): check ours.
    assert_accessible(page, "the row editors of the study change page", within=".rows-widget")
    shot(page, "34-labels-as-rows")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert Criterion.objects.get(study=study, key="usable").labels == {
        "5": "excellent", "3": "middling = fair"}


def test_keys_with_an_equals_sign_or_spaces_survive_the_row_editor(live_server, new_page,
                                                                   client):
    """A key the `key = value` text cannot hold plainly ("a=b", " padded ") is shown as it is
    in the row editor and stored back unchanged by a save (it was cut at its "=" before)."""
    from evalstudy.models import Rater
    from tests.factories import RaterFactory

    study = make_study(n_items=1, n_systems=1)
    metadata = {"a=b": "c = d", " padded ": 1, "plain": "x"}
    rater = RaterFactory(study=study, metadata=metadata)
    page = signed_in_page(live_server, new_page, client)
    page.goto(f"{live_server.url}/admin/evalstudy/rater/{rater.pk}/change/")
    # (PostgreSQL's jsonb orders keys by length: "a=b", "plain", " padded ".)
    expect(page.get_by_label("Metadata, row 1: Key")).to_have_value("a=b")
    expect(page.get_by_label("Metadata, row 3: Key")).to_have_value(" padded ")
    expect(page.get_by_label("Metadata, row 2: Key")).to_have_value("plain")
    page.get_by_label("Metadata, row 2: value").fill("y")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert Rater.objects.get(pk=rater.pk).metadata == {**metadata, "plain": "y"}


ROUND_TRIP_CASES = [
    {"a=b": 1}, {" padded ": "x"}, {'"quoted': "y"}, {"": "empty key"}, {" ": "space key"},
    {"back\\slash": 1}, {'a"b': 1}, {"ünï": "ç"}, {"k": '"v'}, {"k": "x = y"},
    {"a\u2028b": 1}, {"k": "x\u2028y"}, {"a\x85b": 1}, {"k": "x\x85y"}, {"a\ufeff": 1},
    {"\ufeffa": 1}, {"a\x1f": 1}, {"a\u00a0": 1}, {"a\tb": 1}, {"new\nline": 2}, {"[1]": 1},
    {"k": "[1"}, {"\u2003a": 1}, {"k": "\ufeffv"},
]


def test_the_row_editor_writes_back_what_the_server_wrote(new_page):
    """rows_editor.js reads the box the server wrote (widgets.key_value_text) and, after an
    edit, writes it back: the server must read the same keys and values (edge spaces, a
    byte-order mark, U+2028, an empty key were lost or refused before)."""
    from pathlib import Path

    from evalstudy.admin.widgets import key_value_parse, key_value_text

    page = new_page(width=800, height=600)
    page.set_content('<div id="holder"></div>')
    page.add_script_tag(path=str(Path(__file__).resolve().parents[2] / "static" / "js"
                                 / "rows_editor.js"))
    for case in ROUND_TRIP_CASES:
        written = page.evaluate("""(text) => {
            const holder = document.getElementById("holder");
            holder.innerHTML = '<textarea class="rows-editor" data-rows="key_value" name="m">'
                               + '</textarea>';
            const box = holder.querySelector("textarea");
            box.value = text;
            holder.dispatchEvent(new Event("formset:added", {bubbles: true}));
            const row = holder.querySelector("li");
            if (row === null) return null;  // kept as a text box
            row.dispatchEvent(new Event("input", {bubbles: true}));
            return box.value;
        }""", key_value_text(case))
        if written is None:  # a key with a line break: the text box stays, as written
            assert any("\n" in key for key in case), case
            continue
        assert key_value_parse(written) == case, (case, written)


def _kind_boxes_shown(page, form: str) -> set[str]:
    """The kind fields whose boxes are visible in one criterion form (`form`: a selector)."""
    return set(page.evaluate("""(form) => Array.from(
        document.querySelectorAll(form + " [data-kinds]"))
        .filter((box) => box.offsetParent !== null)
        .map((box) => box.querySelector("[name]").name.split("-").pop())""", form))


@pytest.mark.parametrize("javascript", [True, False])
@pytest.mark.parametrize("width", [1366, 375])
def test_the_criterion_form_shows_only_its_kinds_fields(live_server, new_page, shot, client,
                                                        javascript, width):
    """A yes/no question shows no scale points, options, slider range or severity weights;
    switching the kind swaps the fields at once with JavaScript, and without it the page comes
    back with the new kind's fields (and a sentence saying so) instead of saving."""
    study = make_study(n_items=1, n_systems=2)
    usable = Criterion.objects.get(study=study, key="usable")
    researcher = UserFactory(username="author", is_staff=True, is_superuser=True)
    client.force_login(researcher)
    page = new_page(width=width, height=800, javascript=javascript)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])
    page.goto(f"{live_server.url}/admin/evalstudy/criterion/{usable.pk}/change/")
    assert _kind_boxes_shown(page, "#criterion_form") == set()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.get_by_label("Kind").select_option("slider")
    if not javascript:
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.locator(".errorlist")).to_contain_text("are shown now")
        assert Criterion.objects.get(pk=usable.pk).kind == "binary"
    assert _kind_boxes_shown(page, "#criterion_form") == {"scale_min", "scale_max", "labels"}
    page.get_by_label("Scale min").fill("0")
    page.get_by_label("Scale max").fill("10")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot(page, f"35-criterion-slider-{width}{'' if javascript else '-nojs'}")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    usable.refresh_from_db()
    assert (usable.kind, usable.scale_min, usable.scale_max) == ("slider", 0, 10)
    if javascript:  # the study page: each criterion of the inline swaps on its own
        page.goto(f"{live_server.url}/admin/evalstudy/study/{study.pk}/change/")
        index = page.evaluate("""() => Array.from(document.querySelectorAll(
            'input[name^="criteria-"][name$="-key"]')).find((i) => i.value === "usable")
            .name.split("-")[1]""")
        form = f"#criteria-{index}"
        assert _kind_boxes_shown(page, form) == {"scale_min", "scale_max", "labels"}
        page.locator(f"{form} select[data-kind-select]").select_option("pairwise")
        assert _kind_boxes_shown(page, form) == {"allow_tie", "allow_both"}
        assert page.evaluate("document.documentElement.scrollWidth") <= max(width, 1366)
        shot(page, f"36-study-criteria-pairwise-{width}")


@pytest.mark.parametrize("javascript", [True, False])
def test_rater_labels_and_identity_terms_are_rows_with_and_without_javascript(
        live_server, new_page, shot, client, javascript):
    """No JSON on the study form: a rater label is a row (a label from a menu, its text), an
    identity term a row with a phrase box; "Add a row" adds one, and without JavaScript the
    empty rows at the end take new entries. Saving stores the JSON the spec would."""
    from evalstudy.models import Study

    study = make_study(n_items=2, n_systems=2, rater_labels={"output": "Transcript"})
    page = signed_in_page(live_server, new_page, client) if javascript else None
    if page is None:
        researcher = UserFactory(username="author", is_staff=True, is_superuser=True)
        client.force_login(researcher)
        page = new_page(width=1366, height=768, javascript=False)
        page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                                   "url": live_server.url}])
    page.goto(f"{live_server.url}/admin/evalstudy/study/{study.pk}/change/")
    expect(page.get_by_label("Rater labels, row 1: What raters see instead")).to_have_value(
        "Transcript")
    add = page.get_by_role("button", name="Add a row to Rater labels")
    if javascript:
        for _ in range(3):  # past the three empty rows: a fifth row appears
            add.click()
        row = 5
    else:
        expect(add).to_be_hidden()
        row = 2
    page.get_by_label(f"Rater labels, row {row}: Label").select_option("submit")
    page.get_by_label(f"Rater labels, row {row}: What raters see instead").fill("Next clip")
    page.get_by_label("Identity terms, row 1: Word or phrase").fill("made by Nimbus")
    page.get_by_label("Identity terms, row 1: Phrase (matched word by word across "
                      "punctuation)").check()
    if javascript:  # (the checks run scripts in the page)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1366
        assert_accessible(page, "the study form's row tables", within=".rows-table")
        shot(page, "35-study-form-rows-1366")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    saved = Study.objects.get(pk=study.pk)
    assert saved.rater_labels == {"output": "Transcript", "submit": "Next clip"}
    assert saved.identity_terms == [{"term": "made by Nimbus", "phrase": True}]


def test_the_study_and_metric_forms_fit_a_phone(live_server, new_page, shot, client):
    study = make_study(n_items=2, n_systems=2, identity_terms=["Nimbus"])
    researcher = UserFactory(username="author", is_staff=True, is_superuser=True)
    study.owner = researcher
    study.save()
    client.force_login(researcher)
    for width in (1366, 375):
        page = new_page(width=width, height=900)
        page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                                   "url": live_server.url}])
        page.goto(f"{live_server.url}/admin/evalstudy/study/{study.pk}/change/")
        expect(page.get_by_label("Identity terms, row 1: Word or phrase")).to_have_value("Nimbus")
        shot(page, f"36-study-form-{width}")
        page.goto(f"{live_server.url}/studies/{study.slug}/metrics/")
        page.get_by_text("Start a metric run").click()
        page.get_by_text("Settings of bleu").click()
        expect(page.get_by_label("tokenize")).to_have_value("13a")
        # The form fits (the runs tables below scroll in their own boxes on a phone).
        assert page.evaluate("""() => { const form = document.querySelector("details.card");
            return form.scrollWidth <= form.clientWidth
                && form.getBoundingClientRect().right <= window.innerWidth; }""")
        assert_accessible(page, f"the metric run form at {width} px", within="details.card")
        shot(page, f"37-metric-form-{width}")
