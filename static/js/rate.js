// Conditional questions, keyboard shortcuts and the one-round-trip loop on the rating page. The
// server enforces every rule again (hidden questions are ignored, required ones checked): this
// only helps the rater. With htmx a submission is answered with the next item, swapped in place
// of <main>; everything here therefore finds the form when it acts, never keeps it.
(function () {
  "use strict";
  const form = () => document.getElementById("rate-form");
  // While a submission is on its way the form on screen is already answered and about to go:
  // a shortcut typed then is held and given to the item that comes next (as if typed once it is
  // shown), and Enter does nothing (it would post the old form again, or the new one unseen).
  let loading = null;  // the submission's request (htmx's XMLHttpRequest) until it is answered
  let held = [];

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

  // The server's message under a question ("an answer is required", "must be between 0 and
  // 100") is about the answer it was sent: once the rater changes that answer it no longer
  // holds, and the server checks the new one when the form is sent.
  function answered(q) {
    if (q) for (const message of q.querySelectorAll(":scope > .error")) message.remove();
  }

  function changed(event) {
    if (!(event.target instanceof Element) || !event.target.closest("#rate-form")) return;
    answered(event.target.closest(".question"));
    refresh();
  }
  document.addEventListener("change", changed);
  document.addEventListener("input", changed);

  // The shortcut goes to the first visible question that offers it and is unanswered, else to
  // the first visible question that offers it (to change an answer).
  function shortcut(f, key) {
    const questions = Array.from(f.querySelectorAll(".question"));
    const offers = questions.filter((q) => !q.hidden &&
      q.querySelector(`input[data-shortcut="${CSS.escape(key)}"]`));
    const q = offers.find((q) => !answer(f, q.dataset.key)) || offers[0];
    if (!q) return;
    const input = q.querySelector(`input[data-shortcut="${CSS.escape(key)}"]`);
    // Whatever the kind: a key sets a radio button's answer and toggles a checkbox's (the
    // kind's template says which inputs it offers and under which keys).
    input.checked = input.type === "checkbox" ? !input.checked : true;
    input.focus();
    answered(q);
    refresh();
  }

  document.addEventListener("htmx:beforeRequest", (event) => {
    const f = form();
    if (!f || event.detail.elt !== f) return;
    loading = event.detail.xhr;
    f.setAttribute("aria-busy", "true");
  });

  // The wait is over: the keys held go to the form now on screen (the next item, or the same
  // one if the submission failed), in the order typed.
  function settle() {
    if (!loading) return;
    loading = null;
    const f = form();
    const keys = held;
    held = [];
    if (!f) return;
    f.removeAttribute("aria-busy");
    for (const key of keys) shortcut(f, key);
  }

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
    settle();
  });

  // Nothing was swapped in (no answer, a server error): the form on screen stays. A page load
  // on its way (HX-Redirect: feedback, the end) keeps the page loading.
  document.addEventListener("htmx:afterRequest", (event) => {
    if (event.detail.xhr === loading && !event.detail.keepIndicators) settle();
  });

  document.addEventListener("keydown", (event) => {
    const f = form();
    if (!f || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (loading) {
      if (event.key === "Enter") {
        event.preventDefault();
      } else if (event.key.length === 1 && !(target instanceof HTMLTextAreaElement)) {
        event.preventDefault();
        held.push(event.key.toLowerCase());
      }
      return;
    }
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
    shortcut(f, event.key.toLowerCase());
  });

  refresh();
})();
