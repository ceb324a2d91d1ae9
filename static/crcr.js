// How a page answers an htmx request that went wrong, without losing what is on it.
// - 4xx with HTML (a form with its errors): swapped in like any answer;
// - 4xx with text: the text, inline, right after the control that sent the request;
// - 5xx or no answer: a notice at the top of the page; nothing is replaced.
(function () {
  function inline(element, text) {
    var next = element.nextElementSibling;
    if (!next || !next.classList.contains("inline-error")) {
      next = document.createElement("span");
      next.className = "error inline-error";
      next.setAttribute("role", "alert");
      element.insertAdjacentElement("afterend", next);
    }
    next.textContent = text;
  }
  function notice(text) {
    var box = document.getElementById("notice");
    box.textContent = text;
    box.hidden = false;
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    if (xhr.status < 400) return;
    var html = (xhr.getResponseHeader("Content-Type") || "").indexOf("text/html") === 0;
    if (xhr.status < 500 && html) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    } else if (xhr.status < 500) {
      inline(event.detail.requestConfig.elt, xhr.responseText.trim() || xhr.statusText);
    } else {
      notice("The server failed to answer (" + xhr.status + "): nothing was changed. Try again; if it keeps failing, tell an admin.");
    }
  });
  document.addEventListener("htmx:sendError", function () {
    notice("crcr could not be reached: nothing was changed. Check your connection and try again.");
  });
})();
