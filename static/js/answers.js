// Sliders (direct assessment) and error spans (MQM, ESA) on the rating page. The server checks
// every answer again (range, categories, severities, offsets against the exact text and its
// SHA-256, overlaps): this only lets the rater give them. Everything is found when it acts, as
// htmx swaps in each new item (rate.js).
(function () {
  "use strict";

  // --- sliders: the number field is the answer; the handle only moves it --------------------
  // An untouched slider shows it (data-untouched: a hollow handle on a bare track, and "Not set
  // yet" beside the score and read out as the handle's value) until it has a value; clearing the
  // number makes it untouched again, as an empty number is no answer.
  function touched(box, isSet) {
    const range = box.querySelector("input[type=range]");
    const unset = box.querySelector("[data-slider-unset]");
    range.toggleAttribute("data-untouched", !isSet);
    if (isSet) range.removeAttribute("aria-valuetext");
    else if (unset) range.setAttribute("aria-valuetext", unset.textContent.trim());
    if (unset) unset.hidden = isSet;
  }

  function sliderMoved(target) {
    if (!(target instanceof HTMLInputElement)) return;
    const box = target.closest("[data-slider]");
    if (!box) return;
    const range = box.querySelector("input[type=range]");
    const number = box.querySelector("input[type=number]");
    if (target === range) {
      number.value = range.value;
      touched(box, true);
    } else if (target === number) {
      if (number.value !== "") range.value = number.value;
      touched(box, number.value !== "");
    }
  }

  document.addEventListener("input", (event) => sliderMoved(event.target));
  // A click on the handle where it stands (the middle) moves nothing and fires no input: it is
  // still the rater's choice of that value.
  document.addEventListener("click", (event) => {
    const target = event.target;
    if (target instanceof HTMLInputElement && target.type === "range") sliderMoved(target);
  });

  // --- ranking: a rank given to one output is taken from the others; best-worst: the same
  // output cannot be both ------------------------------------------------------------------
  document.addEventListener("change", (event) => {
    const input = event.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "radio" || !input.checked) return;
    const ranking = input.closest("[data-ranking]");
    if (ranking) {
      for (const other of ranking.querySelectorAll(`input[type=radio][value="${CSS.escape(input.value)}"]`)) {
        if (other !== input) other.checked = false;
      }
      return;
    }
    const bestWorst = input.closest("[data-best-worst]");
    if (bestWorst) {
      const mine = input.name.endsWith("__best") ? "__best" : "__worst";
      const theirs = mine === "__best" ? "__worst" : "__best";
      const key = input.name.slice(0, -mine.length);
      const clash = bestWorst.querySelector(`input[name="${CSS.escape(key + theirs)}"][value="${CSS.escape(input.value)}"]`);
      if (clash && clash.checked) clash.checked = false;
    }
  });

  // --- error spans ------------------------------------------------------------------------
  const state = { panes: {}, cursor: null, anchor: null, side: null };

  function marker() {
    return Array.from(document.querySelectorAll("[data-span-question]"))
      .find((m) => !m.closest(".question").hidden) || null;
  }

  function answer(m) {
    const input = m.querySelector("[data-span-value]");
    try {
      const parsed = input.value ? JSON.parse(input.value) : null;
      if (parsed && Array.isArray(parsed.spans)) return parsed.spans;
    } catch (error) { /* a value the server will refuse with its reason */ }
    return [];
  }

  function store(m, spans) {
    const pane = state.panes.output;
    const sha = pane ? pane.element.dataset.sha256 : "";
    spans.sort((a, b) => (a.side === b.side ? a.start - b.start : a.side === "output" ? -1 : 1));
    m.querySelector("[data-span-value]").value = JSON.stringify({ spans: spans, text_sha256: sha });
    render(m);
  }

  // Offsets count characters as the server does (Python string indices: code points), not
  // JavaScript's UTF-16 units, so an emoji or a rare CJK character before an error does not
  // shift it: the text is handled as an array of code points throughout.
  function tokens(chars) {
    const out = [];
    let start = -1;
    chars.forEach((ch, i) => {
      const space = /\s/.test(ch);
      if (!space && start < 0) start = i;
      if (space && start >= 0) {
        out.push({ start: start, end: i });
        start = -1;
      }
    });
    if (start >= 0) out.push({ start: start, end: chars.length });
    return out;
  }

  function build(element) {
    const side = element.dataset.spanPane;
    const source = document.getElementById(`span-text-${side}`);
    if (!source) return null;
    const text = JSON.parse(source.textContent);
    const chars = Array.from(text);
    const words = tokens(chars);
    const slice = (a, b) => chars.slice(a, b).join("");
    const paragraph = element.querySelector("p");
    paragraph.replaceChildren();
    let at = 0;
    words.forEach((word, index) => {
      if (word.start > at) paragraph.append(document.createTextNode(slice(at, word.start)));
      const span = document.createElement("span");
      span.className = "tok";
      span.dataset.i = String(index);
      span.textContent = slice(word.start, word.end);
      paragraph.append(span);
      at = word.end;
    });
    if (at < chars.length) paragraph.append(document.createTextNode(slice(at, chars.length)));
    element.tabIndex = 0;
    element.setAttribute("role", "group");
    const m = marker();
    if (m) element.setAttribute("aria-description", m.dataset.textPane);
    return { element: element, side: side, slice: slice, words: words, paragraph: paragraph };
  }

  function selection() {
    if (state.side === null || state.cursor === null) return null;
    const pane = state.panes[state.side];
    const low = Math.min(state.anchor, state.cursor);
    const high = Math.max(state.anchor, state.cursor);
    return { side: state.side, start: pane.words[low].start, end: pane.words[high].end,
             text: pane.slice(pane.words[low].start, pane.words[high].end) };
  }

  function render(m) {
    const spans = m ? answer(m) : [];
    const chosen = selection();
    for (const pane of Object.values(state.panes)) {
      pane.element.querySelectorAll(".tok").forEach((tok) => {
        const word = pane.words[Number(tok.dataset.i)];
        const hit = spans.find((s) => (s.side || "output") === pane.side && s.start < word.end && word.start < s.end);
        tok.className = "tok";
        if (hit) tok.classList.add("marked", `severity-${CSS.escape(hit.severity)}`);
        if (chosen && chosen.side === pane.side && chosen.start <= word.start && word.end <= chosen.end) {
          tok.classList.add("selected");
        }
        if (state.side === pane.side && Number(tok.dataset.i) === state.cursor) tok.classList.add("cursor");
      });
    }
    if (!m) return;
    const list = m.querySelector("[data-span-list]");
    list.replaceChildren();
    spans.forEach((span, index) => {
      const pane = state.panes[span.side || "output"];
      const item = document.createElement("li");
      const quote = document.createElement("q");
      quote.textContent = pane ? pane.slice(span.start, span.end) : `${span.start}-${span.end}`;
      const where = span.side === "reference" && pane ? ` (${pane.element.dataset.label})` : "";
      // The severity as the rater chose it (its translated name), the category as written.
      const option = Array.from(m.querySelectorAll("[data-span-severity] option"))
        .find((o) => o.value === span.severity);
      const severity = option ? option.textContent : span.severity;
      item.append(quote, document.createTextNode(`${where}: ${span.category}, ${severity} `));
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "link";
      remove.textContent = m.dataset.textRemove;
      remove.addEventListener("click", () => {
        const kept = answer(m);
        kept.splice(index, 1);
        store(m, kept);
        const next = m.querySelector("[data-span-list] button") || state.panes.output.element;
        next.focus();
      });
      item.append(remove);
      list.append(item);
    });
    m.querySelector("[data-span-empty]").hidden = spans.length > 0;
  }

  function openForm() {
    const m = marker();
    const chosen = selection();
    if (!m || !chosen) return;
    const overlap = answer(m).some((s) => (s.side || "output") === chosen.side && s.start < chosen.end && chosen.start < s.end);
    const form = m.querySelector("[data-span-form]");
    const shown = m.querySelector("[data-span-selected]");
    form.hidden = false;
    if (overlap) {
      shown.textContent = m.dataset.textOverlap;
      shown.setAttribute("role", "alert");
      m.querySelector("[data-span-add]").disabled = true;
      m.querySelector("[data-span-cancel]").focus();
      return;
    }
    shown.removeAttribute("role");
    shown.textContent = `${m.dataset.textSelected} “${chosen.text}”`;
    m.querySelector("[data-span-add]").disabled = false;
    m.querySelector("[data-span-category]").focus();
  }

  function closeForm(m, focusPane) {
    m.querySelector("[data-span-form]").hidden = true;
    const pane = state.side ? state.panes[state.side] : state.panes.output;
    state.anchor = state.cursor;
    render(m);
    if (focusPane && pane) pane.element.focus();
  }

  function init() {
    state.panes = {};
    state.cursor = state.anchor = state.side = null;
    const m = marker();
    if (!m) return;
    for (const element of document.querySelectorAll("[data-span-pane]")) {
      const pane = build(element);
      if (pane) state.panes[pane.side] = pane;
    }
    if (!m.querySelector("[data-span-value]").value) store(m, []);
    render(m);
  }

  document.addEventListener("keydown", (event) => {
    const element = event.target instanceof Element && event.target.closest("[data-span-pane]");
    if (!element || event.ctrlKey || event.metaKey || event.altKey) return;
    const pane = state.panes[element.dataset.spanPane];
    if (!pane || pane.words.length === 0) return;
    const last = pane.words.length - 1;
    if (state.side !== pane.side) {
      state.side = pane.side;
      state.cursor = state.anchor = 0;
    }
    const moves = { ArrowRight: 1, ArrowLeft: -1, Home: -Infinity, End: Infinity };
    if (event.key in moves) {
      state.cursor = Math.max(0, Math.min(last, state.cursor + moves[event.key]));
      if (!event.shiftKey) state.anchor = state.cursor;
      render(marker());
    } else if (event.key === "m" || event.key === "M" || event.key === "Enter") {
      openForm();
    } else if (event.key === "Escape") {
      state.anchor = state.cursor;
      render(marker());
    } else {
      return;
    }
    event.preventDefault();
  });

  document.addEventListener("focusin", (event) => {
    const element = event.target instanceof Element && event.target.matches("[data-span-pane]") ? event.target : null;
    if (element && state.side !== element.dataset.spanPane && state.panes[element.dataset.spanPane]) {
      state.side = element.dataset.spanPane;
      state.cursor = state.anchor = 0;
      render(marker());
    }
  });

  document.addEventListener("mouseup", (event) => {
    const element = event.target instanceof Element && event.target.closest("[data-span-pane]");
    if (!element) return;
    const pane = state.panes[element.dataset.spanPane];
    const chosen = window.getSelection();
    if (!pane || !chosen || chosen.isCollapsed) return;
    const hit = Array.from(pane.element.querySelectorAll(".tok")).filter((tok) => chosen.containsNode(tok, true));
    if (hit.length === 0) return;
    state.side = pane.side;
    state.anchor = Number(hit[0].dataset.i);
    state.cursor = Number(hit[hit.length - 1].dataset.i);
    chosen.removeAllRanges();
    render(marker());
    openForm();
  });

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const m = target && target.closest("[data-span-question]");
    if (!m) return;
    if (target.closest("[data-span-add]")) {
      const chosen = selection();
      if (!chosen) return;
      const spans = answer(m);
      spans.push({ start: chosen.start, end: chosen.end, side: chosen.side,
                   category: m.querySelector("[data-span-category]").value,
                   severity: m.querySelector("[data-span-severity]").value });
      store(m, spans);
      closeForm(m, true);
    } else if (target.closest("[data-span-cancel]")) {
      closeForm(m, true);
    }
  });

  document.addEventListener("keydown", (event) => {
    const m = event.target instanceof Element && event.target.closest("[data-span-form]");
    if (m && event.key === "Escape") {
      event.preventDefault();
      closeForm(event.target.closest("[data-span-question]"), true);
    }
  });

  document.addEventListener("htmx:afterSwap", init);
  init();
})();
