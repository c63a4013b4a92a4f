// The admin's structured fields (evalstudy/admin/widgets.py, `textarea.rows-editor`): scale
// labels, options, expected answers and metadata shown as rows of inputs (key and value, or
// one value) with "Add a row" and a remove button per row, instead of one entry a line in a
// text box. The text box stays the form field: every edit writes the rows back into it in
// the format the server reads (`key = value`, or one value a line), so the server's
// validation and its row-numbered errors are the same with and without this file.
(function () {
  "use strict";

  const POINT = /^\s*-?\d+\s*=/;

  function looksLikeWholeJson(text) {
    const trimmed = text.trim();
    if (!/^[[{]/.test(trimmed)) return false;
    try { JSON.parse(trimmed); return true; } catch (e) { return false; }
  }

  const QUOTED_KEY = /^\s*("(?:[^"\\]|\\.)*")\s*=/;

  function splitRow(kind, line) {
    // [key, value, key was quoted], as evalstudy/admin/widgets.py reads a row: key/value rows
    // split at their first "=" unless the key is JSON-quoted (a key holding "=" or spaces at
    // either end, or an empty key); scale labels only when the row starts with a
    // whole-number point (a label alone may hold "=").
    if (kind === "lines" || (kind === "labels" && !POINT.test(line))) {
      return ["", line.trim(), false];
    }
    const quoted = QUOTED_KEY.exec(line);
    if (quoted) {
      try {
        return [JSON.parse(quoted[1]), line.slice(quoted[0].length).trim(), true];
      } catch (e) { /* not a JSON string: read it as a plain key */ }
    }
    const at = line.indexOf("=");
    if (at < 0) return [line.trim(), "", false];
    return [line.slice(0, at).trim(), line.slice(at + 1).trim(), false];
  }

  // A character that JavaScript's trim() or Python's strip() removes (the server's
  // `_edged`): a key with one at either end is quoted so that neither side drops it.
  const EDGE = /^[\s\x1c-\x1f\x85]|[\s\x1c-\x1f\x85]$/;

  function keyText(key) {
    // Quoted exactly when the server's `_key_text` quotes it.
    if (key === "" || key.includes("=") || EDGE.test(key) || key.startsWith('"') ||
        /[\r\n]/.test(key)) {
      return JSON.stringify(key);
    }
    return key;
  }

  function joinRow(kind, key, value, keepKey) {
    if (kind === "lines") return value;
    if (kind === "labels" && key === "" && !keepKey) return value;
    return keyText(key) + " = " + value;
  }

  function fieldName(box) {
    // "Labels of usable": the field's label (a tabular inline's column header) and, in an
    // inline, the row it belongs to.
    const label = box.id && document.querySelector('label[for="' + box.id + '"]');
    let name = label ? label.textContent : "";
    const cell = box.closest("td");
    if (!name && cell) {
      const header = cell.closest("table").querySelectorAll("thead th")[cell.cellIndex];
      name = header ? header.textContent : "";
    }
    name = (name || box.name).replace(/:\s*$/, "").trim();
    const inline = box.closest(".inline-related, tr.form-row");
    const owner = inline && inline.querySelector(".inline_label, td.original p");
    const ownerName = owner ? owner.textContent.trim() : "";
    return ownerName ? name + " of " + ownerName : name;
  }

  function enhance(box) {
    const kind = box.dataset.rows;
    if (box.dataset.rowsReady || looksLikeWholeJson(box.value)) return;  // JSON: keep the box
    const parsed = box.value.split(/\r?\n/).filter(function (line) {
      return line.trim() !== "";
    }).map(function (line) { return splitRow(kind, line); });
    // A one-line input drops line breaks from its value: a key holding one stays in the box.
    if (parsed.some(function (parts) { return /[\r\n]/.test(parts[0]); })) return;
    box.dataset.rowsReady = "1";
    const what = fieldName(box);
    const keyName = kind === "labels" ? "Point (optional)" : "Key";
    const editor = document.createElement("div");
    editor.className = "rows-widget";
    const list = document.createElement("ol");
    editor.appendChild(list);

    function sync() {
      const lines = [];
      list.querySelectorAll("li").forEach(function (row) {
        const key = row.querySelector("input.row-key");
        const value = row.querySelector("input.row-value").value;
        // A key read quoted (spaces at an end, an empty key) is kept exactly as it was stored;
        // a typed key is trimmed, and a row with neither key nor value is no row.
        const keyValue = !key ? "" : key.dataset.quoted ? key.value : key.value.trim();
        if (!(key && key.dataset.quoted) && keyValue === "" && value.trim() === "") return;
        lines.push(joinRow(kind, keyValue, value.trim(), Boolean(key && key.dataset.quoted)));
      });
      box.value = lines.join("\n");
      box.dispatchEvent(new Event("change", { bubbles: true }));
    }

    function label() {
      list.querySelectorAll("li").forEach(function (row, index) {
        const n = index + 1;
        const key = row.querySelector("input.row-key");
        if (key) key.setAttribute("aria-label", what + ", row " + n + ": " + keyName);
        row.querySelector("input.row-value").setAttribute(
          "aria-label", what + ", row " + n + ": " + (kind === "lines" ? "value" : kind === "labels" ? "label" : "value"));
        row.querySelector("button").setAttribute("aria-label", "Remove row " + n + " of " + what);
      });
    }

    function textInput(className, value, placeholder) {
      const input = document.createElement("input");
      input.type = "text";
      input.className = className;
      input.value = value;
      input.placeholder = placeholder;
      return input;
    }

    function addRow(key, value, quoted) {
      const row = document.createElement("li");
      if (kind !== "lines") {
        const keyInput = textInput("row-key", key, kind === "labels" ? "point" : "key");
        if (quoted) keyInput.dataset.quoted = "1";
        row.appendChild(keyInput);
        const eq = document.createElement("span");
        eq.className = "row-eq";
        eq.textContent = "=";
        eq.setAttribute("aria-hidden", "true");
        row.appendChild(eq);
      }
      row.appendChild(textInput("row-value", value, kind === "labels" ? "label" : "value"));
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "row-remove";
      remove.textContent = "×";
      remove.addEventListener("click", function () { row.remove(); label(); sync(); });
      row.appendChild(remove);
      row.addEventListener("input", sync);
      list.appendChild(row);
      label();
      return row;
    }

    parsed.forEach(function (parts) { addRow(parts[0], parts[1], parts[2]); });
    const tools = document.createElement("p");
    tools.className = "rows-tools";
    const add = document.createElement("button");
    add.type = "button";
    add.textContent = "Add a row";
    add.setAttribute("aria-label", "Add a row to " + what);
    add.addEventListener("click", function () {
      const row = addRow("", "");
      row.querySelector("input").focus();
    });
    const asText = document.createElement("button");
    asText.type = "button";
    asText.textContent = "Edit as text";
    asText.setAttribute("aria-label", "Edit as text: " + what);
    asText.addEventListener("click", function () {
      sync();
      editor.remove();
      box.hidden = false;
      box.focus();
    });
    tools.appendChild(add);
    tools.appendChild(asText);
    editor.appendChild(tools);
    box.hidden = true;
    box.after(editor);
  }

  function enhanceAll(root) {
    (root || document).querySelectorAll("textarea.rows-editor").forEach(function (box) {
      // The admin's empty inline template (`__prefix__`) is cloned by "Add another": enhance
      // the clone, not the template.
      if (!box.name.includes("__prefix__")) enhance(box);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { enhanceAll(document); });
  document.addEventListener("formset:added", function (event) { enhanceAll(event.target); });
})();
