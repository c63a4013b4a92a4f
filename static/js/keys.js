// Enter activates the page's one primary action (marked data-enter) when the focus is not on a
// control that handles Enter itself. The rating form has its own handler (rate.js).
(function () {
  "use strict";
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.defaultPrevented || document.getElementById("rate-form")) {
      return;
    }
    const target = event.target;
    if (target instanceof Element && target.closest("button, a, textarea, input, select")) return;
    const primary = document.querySelector("[data-enter]");
    if (primary) {
      event.preventDefault();
      primary.click();
    }
  });
})();
