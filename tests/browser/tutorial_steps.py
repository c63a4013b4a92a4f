"""The steps of the tutorial (docs/tutorial.md, "Your first study in ten minutes"), one function
each, driving a browser the way the page tells a person to.

The page is the source of truth and this module holds it to its word. `tutorial_steps` reads
the page: each `## N. Title` heading is a step, its **bold** texts are the labels on the
screen it names, its `code` spans the values it types, its fenced blocks what it pastes and
its image the screenshot of that step. A step function acts only through a `Tutor`, which
refuses to click, fill or choose a label the step's text does not name in bold, or to type a
value the text does not give, and which, when the step ends, fails unless every bold label of
the step was met on a page during the step (clicked, filled, chosen, or found in the page's
text). So the page cannot name a button the product lacks, and the test cannot click one the
page does not mention.

Used by tests/browser/test_tutorial_browser.py (against the live test server with a real
Celery worker) and bench/first_hour.py (against `make run`, timing each step). Neither
depends on pytest here: the checks are playwright's `expect` and `Drift` errors.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Locator, Page, expect

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
IMAGES = ROOT / "docs" / "img" / "tutorial"
WIDTH, HEIGHT = 1366, 768
# How long a background run (metrics, analysis) may take before the step fails: the worker
# may still be starting, and a loaded 2-core machine is slow.
RUN_TIMEOUT_MS = 180_000
# Keys a step presses, written in the page as `Enter`, `y`, `5`.
SLUG = "my-first-study"


class Drift(AssertionError):
    """The tutorial and the product (or the steps' code) no longer say the same thing."""


# --- reading the page -------------------------------------------------------------------------
@dataclass
class DocStep:
    number: int
    title: str
    text: str
    labels: list[str]  # **bold**, in order, whitespace collapsed
    typed: set[str]  # `code` spans
    blocks: list[str]  # fenced code blocks, as written
    image: str | None  # "img/tutorial/NN-name.png"

    @property
    def heading(self) -> str:
        return f"{self.number}. {self.title}"


_HEADING = re.compile(r"^## (\d+)\. (.+)$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)\n```$", re.DOTALL | re.MULTILINE)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
_CODE = re.compile(r"`([^`]+)`")
_IMAGE = re.compile(r"!\[[^\]]*\]\((img/tutorial/[^)]+)\)")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def tutorial_steps(text: str | None = None) -> list[DocStep]:
    """The numbered steps of docs/tutorial.md (or of `text`), in the page's order. Sections
    without a number (the introduction, "Next steps") are not steps."""
    text = _COMMENT.sub("", TUTORIAL.read_text(encoding="utf-8") if text is None else text)
    headings = list(_HEADING.finditer(text))
    steps = []
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        body = text[heading.end():end]
        following = re.search(r"^## ", body, re.MULTILINE)  # an unnumbered section after it
        body = body[:following.start()] if following else body
        blocks = _FENCE.findall(body)
        prose = _FENCE.sub("", body)
        image = _IMAGE.search(prose)
        steps.append(DocStep(
            number=int(heading.group(1)), title=heading.group(2).strip(), text=prose,
            labels=list(dict.fromkeys(_collapse(b) for b in _BOLD.findall(prose))),
            typed={_collapse(c) for c in _CODE.findall(prose)}, blocks=blocks,
            image=image.group(1) if image else None))
    return steps


# --- acting as the page says ------------------------------------------------------------------
@dataclass
class Tutor:
    """One person following the tutorial: the researcher's page, pages of their own for the
    raters (`window`), and the step being followed. `screenshots`: where the steps' images are
    written (None: not written)."""

    page: Page
    base_url: str
    open_window: Callable[[], Page]
    screenshots: Path | None = None
    step: DocStep | None = None
    met: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)  # page texts met during the step
    memory: dict[str, Any] = field(default_factory=dict)  # what a step hands to a later one

    # The step's own words
    def _doc(self) -> DocStep:
        assert self.step is not None, "no step begun"
        return self.step

    def name(self, label: str) -> str:
        """`label`, which the step is about to use: it must be bold in the step's text."""
        step = self._doc()
        if label not in step.labels:
            raise Drift(f"step {step.heading!r} uses the label {label!r}, which docs/tutorial.md "
                        f"does not name in bold there (it names {step.labels})")
        self.met.add(label)
        return label

    def given(self, value: str) -> str:
        """`value`, which the step is about to type: the step's text must give it as `code`
        (or in one of its code blocks)."""
        step = self._doc()
        if value not in step.typed and not any(value in block for block in step.blocks):
            raise Drift(f"step {step.heading!r} types {value!r}, which docs/tutorial.md does not "
                        f"give there as `code` (it gives {sorted(step.typed)})")
        return value

    def look(self, page: Page | None = None) -> None:
        """Remember the page's text as it is now (labels the step names may be on it)."""
        page = page or self.page
        page.wait_for_load_state()
        self.seen.append(_collapse(page.locator("body").inner_text()))

    # Actions, each on a label the page names
    def click(self, label: str, *, role: str = "button", within: Locator | None = None,
              page: Page | None = None, exact: bool = True, timeout: float | None = None,
              ) -> None:
        """Click the `role` (button, link) named `label`; `timeout` (ms): how long the page
        it leads to may take."""
        page = page or self.page
        self.look(page)
        scope = within if within is not None else page
        target = scope.get_by_role(role, name=self.name(label), exact=exact).first  # type: ignore[arg-type]
        target.click(**({"timeout": timeout} if timeout else {}))

    def fill(self, label: str, value: str, *, within: Locator | None = None,
             keys: bool = False) -> None:
        """Type `value` into the field labelled `label`; `keys`: key by key, as a person
        does (for fields that listen to keys, like the admin's slug filled from the title)."""
        scope = within if within is not None else self.page
        box = field_labelled(scope, self.name(label))
        if keys:
            box.press_sequentially(self.given(value))
        else:
            box.fill(self.given(value))

    def fill_column(self, header: str, index: int, value: str, *, table: Locator) -> None:
        """Type into row `index` (from 0) of a tabular inline's column `header`."""
        heading = table.locator("thead th").filter(
            has_text=re.compile(rf"^\s*{re.escape(self.name(header))}\s*$"))
        expect(heading).to_have_count(1)
        column = heading.evaluate("th => th.cellIndex")
        rows = table.locator("tbody tr.form-row:not(.empty-form)")
        rows.nth(index).locator("td").nth(column).locator("input, textarea").first.fill(
            self.given(value))

    def choose(self, label: str, option: str, *, within: Locator | None = None) -> None:
        scope = within if within is not None else self.page
        field_labelled(scope, self.name(label)).select_option(label=self.name(option))

    def press(self, key: str, *, page: Page | None = None) -> None:
        (page or self.page).keyboard.press(self.given(key))

    def see(self, label: str, *, page: Page | None = None, timeout: float | None = None) -> None:
        """Wait until `label` is on the page (a heading, a message, a status)."""
        page = page or self.page
        expect(page.get_by_text(self.name(label)).first).to_be_visible(
            **({"timeout": timeout} if timeout else {}))

    # The step's end
    def shot(self, *, clip: Locator | None = None, page: Page | None = None,
             height: int = HEIGHT) -> None:
        """The step's screenshot, at docs/img/tutorial/<the image the step shows>: the window
        (1366 px wide, `height` high) as a person sees it, scrolled to the top of `clip` (the
        region the step is about) when given. Written only when screenshots are asked for;
        small PNGs (a palette of 128 colours)."""
        step = self._doc()
        if step.image is None:
            raise Drift(f"step {step.heading!r} shows no image (img/tutorial/NN-name.png)")
        if self.screenshots is None:
            return
        page = page or self.page
        if clip is not None:
            clip.evaluate("(region) => window.scrollTo(0, region.getBoundingClientRect().top"
                          " + window.scrollY - 12)")
        if height != HEIGHT:
            page.set_viewport_size({"width": WIDTH, "height": height})
        png = page.screenshot()
        if height != HEIGHT:
            page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
        path = self.screenshots / Path(step.image).name
        path.parent.mkdir(parents=True, exist_ok=True)
        small_png(png, path)

    def finish(self) -> None:
        """Fail unless every bold label of the step was met during it."""
        step = self._doc()
        self.look()
        missing = [label for label in step.labels if label not in self.met
                   and not any(label in text for text in self.seen)]
        if missing:
            raise Drift(f"step {step.heading!r}: docs/tutorial.md names {missing} in bold, "
                        "but the step never met them on a page")


def field_labelled(scope: Page | Locator, label: str) -> Locator:
    """The input, select or text box labelled `label` (Django writes "Label:"); not a
    fieldset of the same name."""
    return scope.get_by_label(re.compile(rf"^{re.escape(label)}:?$")).and_(
        scope.locator("input, select, textarea"))


def small_png(png: bytes, path: Path) -> None:
    """Save a screenshot as a 128-colour PNG (admin pages are flat colours: a fifth of the
    size, no visible loss)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT,
                   dither=Image.Dither.NONE).save(path, optimize=True)


# --- the steps --------------------------------------------------------------------------------
RESEARCHER = ("researcher", "researcher-demo")


def sign_in(tutor: Tutor) -> None:
    page = tutor.page
    page.goto(f"{tutor.base_url}/admin/")
    user, password = RESEARCHER
    tutor.fill("Username", user)
    tutor.fill("Password", password)
    tutor.click("Log in")
    tutor.see("Studies, raters and results")
    tutor.shot(clip=tutor.page.locator(".app-evalstudy"))


def create_study(tutor: Tutor) -> None:
    page = tutor.page
    tutor.look()
    tutor.name("Studies")
    studies_row = page.locator("tr.model-study")
    tutor.click("Add", role="link", within=studies_row)
    tutor.fill("Title", "My first study", keys=True)
    expect(field_labelled(page, tutor.name("Slug"))).to_have_value(
        tutor.given(SLUG))
    systems = page.locator("#systems-group")
    tutor.name("Systems")
    for _ in range(2):
        tutor.click("Add another System", within=systems)
    table = systems.locator("table")
    tutor.fill_column("Name", 0, "asr-a", table=table)
    tutor.fill_column("Name", 1, "asr-b", table=table)
    tutor.click("Save and continue editing", role="button", exact=True)
    tutor.see("was added successfully")
    tutor.see("Edit items in a grid")
    tutor.shot()


def paste_items(tutor: Tutor) -> None:
    page = tutor.page
    tutor.click("Edit items in a grid", role="link", within=page.locator(".object-tools"))
    tutor.see("Output: asr-a")
    tutor.see("Output: asr-b")
    (table,) = tutor._doc().blocks
    # The page's code block, as a person copies it: tabs between the cells.
    assert "\t" in table, "the items table of docs/tutorial.md lost its tabs"
    page.get_by_label(tutor.name("Or paste a table")).fill(tutor.given(table))
    tutor.click("Save items")
    tutor.see("Saved: 4 items and 8 outputs written")
    expect(page.get_by_label("Row 4, Output: asr-b")).to_have_value("what is whether to day")
    tutor.shot()
    with page.expect_navigation():
        page.locator(".breadcrumbs").get_by_role("link", name=tutor.name(SLUG)).click()


def add_criteria(tutor: Tutor) -> None:
    page = tutor.page
    group = page.locator("#criteria-group")
    tutor.name("Criteria")
    tutor.click("Add another Criterion", within=group)
    first = group.locator(".inline-related:not(.empty-form)").nth(0)
    tutor.fill("Key", "meaning", within=first)
    tutor.choose("Kind", "Likert scale", within=first)
    tutor.fill("Prompt", "How much of the meaning is preserved?", within=first)
    tutor.fill("Scale points", "5", within=first)
    tutor.click("Add another Criterion", within=group)
    second = group.locator(".inline-related:not(.empty-form)").nth(1)
    tutor.fill("Key", "usable", within=second)
    tutor.choose("Kind", "Yes / no", within=second)
    tutor.fill("Prompt", "Could this transcript be used as it is?", within=second)
    expect(field_labelled(second, "Scale points")).to_be_hidden()
    tutor.shot(clip=group, height=1150)
    tutor.click("Save and continue editing", exact=True)
    tutor.see("was changed successfully")


def choose_design(tutor: Tutor) -> None:
    page = tutor.page
    tutor.look()
    tutor.choose("Design", "Latin square (each rater sees each item once)")
    ratings = field_labelled(page, tutor.name("Ratings per output"))
    expect(ratings).to_have_value(tutor.given("1"))
    tutor.shot(clip=page.locator("fieldset", has=page.get_by_role("heading", name="Design",
                                                                   exact=True)))


def add_controls(tutor: Tutor) -> None:
    page = tutor.page
    tutor.look()
    calibration = page.locator("#calibration_items-group")
    tutor.name("Calibration items")
    tutor.click("Add another Calibration item", within=calibration)
    item = calibration.locator(".inline-related:not(.empty-form)").first
    tutor.fill("Key", "practice", within=item)
    tutor.fill("Reference", "open the door", within=item)
    tutor.fill("Text", "open the door", within=item)
    _expected(tutor, item, [("meaning", "5"), ("usable", "yes")])
    tutor.fill("Feedback", "The transcript is exactly what was said.", within=item)
    tutor.shot(clip=item.locator(".field-text"))  # the output, its expected answers, feedback
    attention = page.locator("#attention_checks-group")
    tutor.name("Attention checks")
    tutor.click("Add another Attention check", within=attention)
    check = attention.locator(".inline-related:not(.empty-form)").first
    tutor.fill("Key", "nonsense", within=check)
    tutor.fill("Reference", "good morning", within=check)
    tutor.fill("Text", "purple elephant accordion", within=check)
    _expected(tutor, check, [("usable", "no")])
    tutor.name("Crowd platforms and quality")
    tutor.fill("Attention check every", "4")
    tutor.click("Save and continue editing", exact=True)
    tutor.see("was changed successfully")


def _expected(tutor: Tutor, inline: Locator, answers: list[tuple[str, str]]) -> None:
    """The Expected rows of one control item: a criterion's key and its answer a row."""
    tutor.name("Expected")
    rows = inline.locator(".rows-widget")
    for index, (key, value) in enumerate(answers):
        tutor.click("Add a row", within=rows, exact=False)  # "Add a row to Expected of ..."
        row = rows.locator("li").nth(index)
        row.locator("input.row-key").fill(tutor.given(key))
        row.locator("input.row-value").fill(tutor.given(value))


def open_study(tutor: Tutor) -> None:
    """The study page's Open button (evalstudy.admin.study_actions)."""
    tutor.click("Open study")
    tutor.see("“My first study”: opened; raters can start.")
    tutor.see("Status: Open")
    tutor.shot()


def invite_raters(tutor: Tutor) -> None:
    """The study's invite page: two personal links added at once, each shown in full with a
    Copy button (its text is what a person copies)."""
    page = tutor.page
    tutor.click("Invite raters (entry links)", role="link")
    tutor.fill("How many", "2")
    tutor.click("Add links")
    tutor.see("Added 2 personal links.")
    tutor.name("Copy")
    copies = page.locator("table.invite-links button.copy-button")
    expect(copies).to_have_count(2)
    links = [copies.nth(k).get_attribute("data-copy") or "" for k in range(2)]
    assert all(link.startswith(f"{tutor.base_url}/enter/") for link in links), links
    tutor.memory["links"] = [link.removeprefix(tutor.base_url) for link in links]
    tutor.shot()


DONE = "You have finished every item"


def rate_with_keyboard(tutor: Tutor) -> None:
    seen = set()
    for index, link in enumerate(tutor.memory["links"]):
        page = tutor.open_window()
        page.goto(tutor.base_url + link)
        for _ in range(20):
            page.wait_for_load_state()
            tutor.look(page)
            main = page.locator("main").inner_text()
            if DONE in main:
                break
            if "/feedback/" in page.url:
                tutor.see("Practice item: feedback", page=page)
                with page.expect_navigation():
                    tutor.press("Enter", page=page)
                continue
            expect(page.locator("#rate-form")).to_be_visible()
            practice = "Practice item" in main
            attention = tutor.name("purple elephant accordion") in main
            seen |= {"practice"} if practice else {"attention"} if attention else {"target"}
            # As a rater judges: the transcript against what was said.
            said = page.locator(".text.reference p").inner_text()
            written = page.locator(".text.output p").inner_text()
            exact = said.strip() == written.strip()
            tutor.press("5" if exact else "1" if attention else "2", page=page)
            tutor.press("y" if exact else "n", page=page)
            if index == 0 and seen == {"practice", "target"} and not practice:
                tutor.shot(page=page)  # the first item after the practice one, answered
            _submit(page, lambda p=page: tutor.press("Enter", page=p))
        tutor.see(DONE, page=page)
        page.context.close()
    assert seen == {"practice", "attention", "target"}, f"the seats showed {seen}"


def _submit(page: Page, press: Callable[[], None]) -> None:
    """Press Enter and wait for what follows: the next item swapped in place (htmx), or a page
    load (`HX-Redirect`: the practice item's feedback, the end)."""
    old = page.locator("#rate-form").get_attribute("action")
    page.evaluate("window.__beforeSubmit = true")  # gone once another document is loaded
    with page.expect_response(lambda r: r.request.method == "POST" and "/slots/" in r.url
                              ) as answered:
        press()
    response = answered.value
    assert response.status == 200, f"the answer was refused ({response.status})"
    if response.headers.get("hx-redirect"):
        page.wait_for_function(
            "() => !window.__beforeSubmit && document.readyState === 'complete'")
    else:
        expect(page.locator("#rate-form")).not_to_have_attribute("action", old or "")


def run_metrics(tutor: Tutor) -> None:
    page = tutor.page
    with page.expect_navigation():
        page.locator(".breadcrumbs").get_by_role("link", name=tutor.name("Home")).click()
    tutor.name("Studies")
    tutor.click("Studies", role="link", within=page.locator("tr.model-study"))
    tutor.click(SLUG, role="link", within=page.locator("#result_list"))
    tutor.click("Metrics", role="link", within=page.locator(".object-tools"))
    tutor.look()
    page.get_by_text(tutor.name("Start a metric run")).click()
    for metric in ("bleu", "chrf", "rouge", "bertscore", "semantic_distance",
                   "embedding_cosine", "heval"):
        page.get_by_label(tutor.name(metric), exact=True).uncheck()
    for metric in ("wer", "cer"):
        expect(page.get_by_label(tutor.name(metric), exact=True)).to_be_checked()
    # TODO(quick helper): the Start button will answer at once; today the first run's request
    # imports the scorers (about 19 s on a quiet machine).
    tutor.click("Start", timeout=RUN_TIMEOUT_MS)
    runs = page.locator("#metric-runs tbody tr").first
    tutor.name("Runs")
    expect(runs).to_contain_text(tutor.name("Done"), timeout=RUN_TIMEOUT_MS)
    page.reload()
    tutor.see("Per system")
    tutor.see("Results per output")
    tutor.look()
    tutor.shot(clip=page.get_by_role("heading", name="Runs"))


def run_analysis(tutor: Tutor) -> None:
    page = tutor.page
    tutor.click("Study settings", role="link")
    tutor.click("Analysis", role="link", within=page.locator(".object-tools"))
    tutor.click("Run the analysis", timeout=RUN_TIMEOUT_MS)  # TODO(quick helper): at once
    tutor.name("Analyses")
    runs = page.locator("#analysis-runs tbody tr").first
    expect(runs).to_contain_text(tutor.name("Done"), timeout=RUN_TIMEOUT_MS)
    tutor.shot(clip=page.get_by_role("heading", name="Analyses"))


def download_report(tutor: Tutor) -> None:
    page = tutor.page
    runs = page.locator("#analysis-runs tbody tr").first
    tutor.name("Analyses")
    tutor.name("JSON")
    with page.expect_download() as caught:
        tutor.click("PDF", role="link", within=runs)
    download = caught.value
    assert download.suggested_filename == f"{SLUG}-analysis.pdf"
    with open(download.path(), "rb") as pdf:
        assert pdf.read(5) == b"%PDF-", "the report is a PDF"
    tutor.memory["report_pdf"] = download.path()
    tutor.click("HTML", role="link", within=runs)
    expect(page.locator("body")).to_contain_text("meaning")
    tutor.shot()


# In the page's order; each name is the step's heading (checked against docs/tutorial.md).
STEPS: list[tuple[str, Callable[[Tutor], None]]] = [
    ("Sign in", sign_in),
    ("Create a study with two systems", create_study),
    ("Paste the items into the grid", paste_items),
    ("Add a Likert and a yes/no question", add_criteria),
    ("Choose a Latin square", choose_design),
    ("Add a practice item and an attention check", add_controls),
    ("Open the study", open_study),
    ("Invite two raters", invite_raters),
    ("Rate as the two raters, with the keyboard", rate_with_keyboard),
    ("Run the metrics", run_metrics),
    ("Run the analysis", run_analysis),
    ("Download the report", download_report),
]


StepFunction = Callable[[Tutor], None]


def steps_in_order(doc: list[DocStep] | None = None) -> list[tuple[DocStep, StepFunction]]:
    """The page's steps paired with their functions; Drift when the page's headings and
    STEPS differ (a step added, removed, renamed or moved on one side only)."""
    doc = tutorial_steps() if doc is None else doc
    written = [(step.number, step.title) for step in doc]
    coded = [(number, title) for number, (title, _) in enumerate(STEPS, start=1)]
    if written != coded:
        raise Drift(f"docs/tutorial.md's steps {written} are not the steps the code follows "
                    f"{coded}")
    for step in doc:
        expected = f"img/tutorial/{step.number:02d}-"
        if step.image is None or not step.image.startswith(expected):
            raise Drift(f"step {step.heading!r} must show its screenshot {expected}*.png")
    return [(step, function) for step, (_, function) in zip(doc, STEPS, strict=True)]


def follow(tutor: Tutor) -> Iterator[tuple[DocStep, float]]:
    """Follow every step of the tutorial; yields each step with its seconds."""
    for step, function in steps_in_order():
        tutor.step, tutor.met, tutor.seen = step, set(), []
        started = time.perf_counter()
        function(tutor)
        tutor.finish()
        yield step, time.perf_counter() - started
