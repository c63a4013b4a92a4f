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
    // [key, value], as evalstudy/admin/widgets.py reads a row: key/value rows split at their
    // first "=" unless the key is JSON-quoted (a key holding "=" or spaces at either end);
    // scale labels only when the row starts with a whole-number point (a label alone may
    // hold "=").
    if (kind === "lines" || (kind === "labels" && !POINT.test(line))) return ["", line.trim()];
    const quoted = QUOTED_KEY.exec(line);
    if (quoted) {
      try {
        return [JSON.parse(quoted[1]), line.slice(quoted[0].length).trim()];
      } catch (e) { /* not a JSON string: read it as a plain key */ }
    }
    const at = line.indexOf("=");
    if (at < 0) return [line.trim(), ""];
    return [line.slice(0, at).trim(), line.slice(at + 1).trim()];
  }

  function keyText(key) {
    // Quoted exactly when the server's `_key_text` quotes it.
    if (key.includes("=") || key !== key.trim() || key.startsWith('"') || /[\r\n]/.test(key)) {
      return JSON.stringify(key);
    }
    return key;
  }

  function joinRow(kind, key, value) {
    if (kind === "lines") return value;
    if (kind === "labels" && key === "") return value;
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
        // A key is kept as typed (spaces at either end included: it is then quoted), so a
        // stored key comes back unchanged; a blank key is no key.
        const keyValue = key && key.value.trim() !== "" ? key.value : "";
        if (keyValue === "" && value.trim() === "") return;
        lines.push(joinRow(kind, keyValue, value.trim()));
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

    function addRow(key, value) {
      const row = document.createElement("li");
      if (kind !== "lines") {
        row.appendChild(textInput("row-key", key, kind === "labels" ? "point" : "key"));
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

    box.value.split(/\r?\n/).forEach(function (line) {
      if (line.trim() === "") return;
      const parts = splitRow(kind, line);
      addRow(parts[0], parts[1]);
    });
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
