// Copy buttons beside entry links (evalstudy/admin/invite.py copy_field): a click copies the
// button's data-copy text and says so in the status beside it. No inline script (the Content
// Security Policy forbids it); without the Clipboard API (a page not served over https or
// localhost) a selected, off-screen text box and execCommand do it.
(function () {
  "use strict";

  function fallbackCopy(text) {
    var box = document.createElement("textarea");
    box.value = text;
    box.setAttribute("readonly", "");
    box.className = "copy-scratch";
    document.body.appendChild(box);
    box.select();
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (error) { copied = false; }
    document.body.removeChild(box);
    return copied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copy(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () { return fallbackCopy(text); });
    }
    return fallbackCopy(text);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) { return; }
    event.preventDefault();
    var status = button.parentNode.querySelector(".copy-status");
    copy(button.dataset.copy).then(function () {
      button.classList.add("copied");
      if (status) { status.textContent = button.dataset.copied || "Copied"; }
    }, function () {
      if (status) { status.textContent = button.dataset.refused || "Select the link and copy it (Ctrl+C)."; }
    });
  });
}());
