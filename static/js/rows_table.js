// The admin's row tables (evalstudy/admin/row_fields.py): "Add a row" adds an empty row (a
// copy of the last row, emptied and renumbered) and raises the `<field>-rows` count the server
// reads the rows by. Without this file the table already ends with empty rows, and saving
// brings new ones: the button is only shown when this script runs.
(function () {
  "use strict";

  function renumber(row, index) {
    row.querySelectorAll("label[for]").forEach(function (label) {
      label.htmlFor = label.htmlFor.replace(/-\d+-([^-]+)$/, "-" + index + "-$1");
    });
    row.querySelectorAll("input, select").forEach(function (input) {
      const name = input.name.replace(/-\d+-([^-]+)$/, "-" + index + "-$1");
      input.name = name;
      input.id = "id_" + name;
      const label = input.getAttribute("aria-label") || "";
      input.setAttribute("aria-label", label.replace(/row \d+:/, "row " + (index + 1) + ":"));
      if (input.type === "checkbox") {
        input.checked = false;
      } else {
        input.value = "";
      }
    });
  }

  function addRow(table) {
    const count = table.querySelector('input[type="hidden"][name$="-rows"]');
    const body = table.querySelector("tbody");
    const last = body.lastElementChild;
    if (!count || !last) {
      return;
    }
    const index = parseInt(count.value, 10) || 0;
    const row = last.cloneNode(true);
    renumber(row, index);
    body.appendChild(row);
    count.value = String(index + 1);
    const first = row.querySelector("input, select");
    if (first) {
      first.focus();
    }
  }

  function setUp(table) {
    const button = table.querySelector("[data-rows-add]");
    const note = table.querySelector("[data-rows-nojs]");
    if (!button || button.dataset.ready) {
      return;
    }
    button.dataset.ready = "1";
    button.hidden = false;
    if (note) {
      note.hidden = true;
    }
    button.addEventListener("click", function () { addRow(table); });
  }

  function setUpAll() {
    document.querySelectorAll("[data-rows-table]").forEach(setUp);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUpAll);
  } else {
    setUpAll();
  }
})();
