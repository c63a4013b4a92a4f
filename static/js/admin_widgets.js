// The study admin's items grid (templates/admin/evalstudy/study/items_grid.html): paste a
// block copied from a spreadsheet into a cell and it fills the cells to its right and below
// (adding rows as needed); "Add a row" adds an empty row. On submit the cells go as one JSON
// field (`cells`), so that a page grown by pasting stays within Django's limit on the number
// of fields (DATA_UPLOAD_MAX_NUMBER_FIELDS). Without this file the grid is a plain form of
// text boxes, a page of rows that fits the limit, and the "paste a table" box does the same
// on the server.
(function () {
  "use strict";

  function parseTable(text) {
    // Tab-separated, as spreadsheets copy: cells holding tabs, quotes or line breaks come
    // quoted ("a ""b"" c"), a quote doubled inside.
    const rows = [[]];
    let cell = "";
    let quoted = false;
    text = text.replace(/\r\n?/g, "\n").replace(/\n$/, "");
    for (let i = 0; i < text.length; i += 1) {
      const c = text[i];
      if (quoted) {
        if (c === '"' && text[i + 1] === '"') { cell += '"'; i += 1; }
        else if (c === '"') { quoted = false; }
        else { cell += c; }
      } else if (c === '"' && cell === "") { quoted = true; }
      else if (c === "\t") { rows[rows.length - 1].push(cell); cell = ""; }
      else if (c === "\n") { rows[rows.length - 1].push(cell); cell = ""; rows.push([]); }
      else { cell += c; }
    }
    rows[rows.length - 1].push(cell);
    return rows;
  }

  function init() {
    const table = document.getElementById("items-grid");
    const count = document.getElementById("grid-rows");
    const first = Number((document.getElementById("grid-first") || {}).value || 1);
    const addButton = document.getElementById("grid-add-row");
    if (!table || !count || !addButton) { return; }
    const body = table.tBodies[0];
    const nColumns = table.tHead.rows[0].cells.length - 2;  // less "Row" and "Remove"

    function addRow() {
      const number = first + body.rows.length;
      const tr = document.createElement("tr");
      tr.dataset.row = String(number);
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = String(number);
      tr.appendChild(th);
      for (let j = 0; j < nColumns; j += 1) {
        const td = document.createElement("td");
        const box = document.createElement("textarea");
        box.name = "c-" + number + "-" + j;
        box.rows = 1;
        box.dataset.col = String(j);
        box.setAttribute("aria-label", "Row " + number + ", " +
                         table.tHead.rows[0].cells[j + 1].textContent);
        td.appendChild(box);
        tr.appendChild(td);
      }
      tr.appendChild(document.createElement("td"));
      body.appendChild(tr);
      count.value = String(body.rows.length);
      return tr;
    }

    const form = table.closest("form");
    form.addEventListener("submit", function () {
      // The cells' fields become one JSON field: disabled fields are not posted.
      const cells = {};
      body.querySelectorAll("textarea[name], input[type=hidden][name]").forEach(function (f) {
        cells[f.name] = f.value;
      });
      body.querySelectorAll("input[type=checkbox][name]").forEach(function (box) {
        if (box.checked) { cells[box.name] = "on"; }
      });
      let field = form.querySelector('input[name="cells"]');
      if (!field) {
        field = document.createElement("input");
        field.type = "hidden";
        field.name = "cells";
        form.appendChild(field);
      }
      field.value = JSON.stringify(cells);
      body.querySelectorAll("[name]").forEach(function (f) { f.disabled = true; });
    });
    // Back to this page from the browser's history: the cells are fields again.
    window.addEventListener("pageshow", function () {
      body.querySelectorAll("[name]").forEach(function (f) { f.disabled = false; });
    });

    addButton.hidden = false;
    addButton.addEventListener("click", function () {
      addRow().querySelector("textarea").focus();
    });

    body.addEventListener("paste", function (event) {
      const box = event.target;
      if (!(box instanceof HTMLTextAreaElement) || box.readOnly) { return; }
      const text = (event.clipboardData || window.clipboardData).getData("text");
      if (text.indexOf("\t") === -1 && text.replace(/\r?\n$/, "").indexOf("\n") === -1) {
        return;  // one cell's text: the browser pastes it
      }
      event.preventDefault();
      const table = parseTable(text);
      const startRow = Array.prototype.indexOf.call(body.rows, box.closest("tr"));
      const startCol = Number(box.dataset.col);
      table.forEach(function (cells, i) {
        while (body.rows.length <= startRow + i) { addRow(); }
        const tr = body.rows[startRow + i];
        cells.forEach(function (value, k) {
          const target = tr.querySelector('textarea[data-col="' + (startCol + k) + '"]');
          if (target && !target.readOnly) { target.value = value; }
        });
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
}());
