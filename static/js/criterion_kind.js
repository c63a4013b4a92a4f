// The admin's criterion form shows only its kind's fields (evalstudy/admin/kind_fields.py):
// when the kind menu changes, show the boxes of the fields the new kind has (data-kinds lists
// the kinds of each) and hide the others, at once, and say in the hidden `<kind>_shown` input
// which kind's fields the form shows, so that the server saves it as it is. Works on each
// criterion of the study page's inline and on forms added there later.
(function () {
  "use strict";

  function formOf(select) {
    return select.closest(".inline-related") || select.closest("form");
  }

  function showFieldsOf(select) {
    const form = formOf(select);
    if (!form) {
      return;
    }
    const kind = select.value;
    form.querySelectorAll("[data-kinds]").forEach(function (box) {
      box.hidden = !box.dataset.kinds.split(" ").includes(kind);
    });
    const shown = form.querySelector('input[type="hidden"][name="' + select.name + '_shown"]');
    if (shown) {
      shown.value = kind;
    }
  }

  document.addEventListener("change", function (event) {
    if (event.target instanceof HTMLSelectElement && event.target.hasAttribute("data-kind-select")) {
      showFieldsOf(event.target);
    }
  });
})();
