// Conditional questions and keyboard shortcuts on the rating page. The server enforces both
// rules again (hidden questions are ignored, required ones checked): this only helps the rater.
(function () {
  "use strict";
  const form = document.getElementById("rate-form");
  if (!form) return;
  const questions = Array.from(form.querySelectorAll(".question"));

  function answer(key) {
    const checked = form.querySelector(`input[name="${key}"]:checked`);
    return checked ? checked.value : "";
  }

  function visible(q) {
    const parent = q.dataset.showIf;
    if (!parent) return true;
    const parentQ = form.querySelector(`.question[data-key="${parent}"]`);
    return visible(parentQ) && q.dataset.showValues.split("|").includes(answer(parent));
  }

  function refresh() {
    for (const q of questions) q.hidden = !visible(q);
  }

  form.addEventListener("change", refresh);
  refresh();

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target instanceof HTMLTextAreaElement) return;
    if (event.key === "Enter") {
      event.preventDefault();
      form.requestSubmit();
      return;
    }
    const key = event.key.toLowerCase();
    // The shortcut goes to the first visible question that offers it and is unanswered,
    // else to the first visible question that offers it (to change an answer).
    const offers = questions.filter((q) => !q.hidden &&
      q.querySelector(`input[data-shortcut="${CSS.escape(key)}"]`));
    const q = offers.find((q) => !answer(q.dataset.key)) || offers[0];
    if (!q) return;
    const input = q.querySelector(`input[data-shortcut="${CSS.escape(key)}"]`);
    input.checked = true;
    input.focus();
    refresh();
  });
})();
