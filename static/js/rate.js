// Conditional questions, keyboard shortcuts and the one-round-trip loop on the rating page. The
// server enforces every rule again (hidden questions are ignored, required ones checked): this
// only helps the rater. With htmx a submission is answered with the next item, swapped in place
// of <main>; everything here therefore finds the form when it acts, never keeps it.
(function () {
  "use strict";
  const form = () => document.getElementById("rate-form");

  function answer(f, key) {
    const checked = f.querySelector(`input[name="${CSS.escape(key)}"]:checked`);
    return checked ? checked.value : "";
  }

  function visible(f, q) {
    const parent = q.dataset.showIf;
    if (!parent) return true;
    const parentQ = f.querySelector(`.question[data-key="${CSS.escape(parent)}"]`);
    return !!parentQ && visible(f, parentQ) &&
      q.dataset.showValues.split("|").includes(answer(f, parent));
  }

  function refresh() {
    const f = form();
    if (!f) return;
    for (const q of f.querySelectorAll(".question")) q.hidden = !visible(f, q);
  }

  document.addEventListener("change", (event) => {
    if (event.target instanceof Element && event.target.closest("#rate-form")) refresh();
  });

  // A new item arrived: show its questions, tell screen readers where the rater is, and put
  // the focus at the top of the item (the old focused control is gone).
  document.addEventListener("htmx:afterSwap", () => {
    refresh();
    const f = form();
    const announcer = document.getElementById("item-announcer");
    if (f && announcer) announcer.textContent = f.dataset.item;  // "Item 3 of 9", in the study's language
    const main = document.getElementById("main");
    if (main) {
      main.setAttribute("tabindex", "-1");
      main.focus({ preventScroll: false });
      window.scrollTo(0, 0);
    }
  });

  document.addEventListener("keydown", (event) => {
    const f = form();
    if (!f || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target instanceof HTMLTextAreaElement) return;
    // A widget that handles its own keys says so (data-own-keys: the error marker and the
    // texts it marks, answers.js).
    if (target instanceof Element && target.closest("[data-own-keys], select")) return;
    const typing = target instanceof HTMLInputElement && !["radio", "checkbox"].includes(target.type);
    if (typing && event.key !== "Enter") return;  // digits typed into a number are the number
    if (event.key === "Enter") {
      event.preventDefault();
      f.requestSubmit();
      return;
    }
    const key = event.key.toLowerCase();
    const questions = Array.from(f.querySelectorAll(".question"));
    // The shortcut goes to the first visible question that offers it and is unanswered,
    // else to the first visible question that offers it (to change an answer).
    const offers = questions.filter((q) => !q.hidden &&
      q.querySelector(`input[data-shortcut="${CSS.escape(key)}"]`));
    const q = offers.find((q) => !answer(f, q.dataset.key)) || offers[0];
    if (!q) return;
    const input = q.querySelector(`input[data-shortcut="${CSS.escape(key)}"]`);
    // Whatever the kind: a key sets a radio button's answer and toggles a checkbox's (the
    // kind's template says which inputs it offers and under which keys).
    input.checked = input.type === "checkbox" ? !input.checked : true;
    input.focus();
    refresh();
  });

  refresh();
})();
