// Integrity counters of the item on screen (annotation.integrity): pastes into text inputs,
// times the page was hidden or left and the seconds away, keystrokes into text inputs, and
// every pointer/keyboard input. They travel with the answers in the hidden `integrity.behaviour` field;
// the server clamps them and never refuses an answer over them. Counters start again whenever
// another item is shown (the form's action names the slot).
(function () {
  "use strict";
  const TEXT_INPUTS = "textarea, input[type=text], input[type=search], input:not([type]), [contenteditable]";
  const form = () => document.getElementById("rate-form");
  let slot = null;
  let counts = null;
  let awayMs = 0;
  let awaySince = null;

  function reset(f) {
    slot = f ? f.getAttribute("action") : null;
    counts = { pastes: 0, focus_losses: 0, keystrokes: 0, inputs: 0 };
    awayMs = 0;
    awaySince = document.hidden ? Date.now() : null;
  }

  function current() {
    const f = form();
    if (!counts || (f && f.getAttribute("action") !== slot)) reset(f);
    return f;
  }

  function inForm(target) {
    return target instanceof Element && !!target.closest("#rate-form");
  }

  function leave() {
    current();
    if (awaySince === null) {
      awaySince = Date.now();
      counts.focus_losses += 1;
    }
  }

  function back() {
    current();
    if (awaySince !== null) {
      awayMs += Date.now() - awaySince;
      awaySince = null;
    }
  }

  document.addEventListener("visibilitychange", () => (document.hidden ? leave() : back()));
  window.addEventListener("blur", leave);
  window.addEventListener("focus", back);

  document.addEventListener("paste", (event) => {
    current();
    const target = event.target;
    if (inForm(target) && (target.matches(TEXT_INPUTS) || target.closest("[data-span-pane]"))) {
      counts.pastes += 1;
    }
  }, true);

  document.addEventListener("keydown", (event) => {
    current();
    counts.inputs += 1;
    if (inForm(event.target) && event.target.matches(TEXT_INPUTS)) counts.keystrokes += 1;
  }, true);

  document.addEventListener("pointerdown", () => {
    current();
    counts.inputs += 1;
  }, true);

  // Capture phase: the field is filled before htmx (or the browser) reads the form.
  document.addEventListener("submit", (event) => {
    const f = current();
    if (!f || event.target !== f) return;
    const field = f.querySelector('input[name="integrity.behaviour"]');
    if (!field) return;
    const away = awayMs + (awaySince !== null ? Date.now() - awaySince : 0);
    field.value = JSON.stringify({ ...counts, seconds_away: Math.round(away / 1000) });
  }, true);

  document.addEventListener("htmx:afterSwap", () => reset(form()));
  reset(form());
})();
