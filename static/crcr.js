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

/* Review queue: keyboard shortcuts, and focus kept on a row across htmx swaps. */
// j/k next/previous proposal, a approve, r reject, e edit, ? the list of keys (Esc closes it).
// Keys are ignored while typing in a field. After an inline action the row keeps the focus
// (its edit form's first field while editing); after a decision it moves to the next
// pending row, so a reviewer never has to find their place again.
(function () {
  var lastRow = null, pending = null;
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("tr.proposal")); }
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  function current() {
    var active = document.activeElement;
    var row = active && active.closest ? active.closest("tr.proposal") : null;
    return row || (lastRow && document.contains(lastRow) ? lastRow : null);
  }
  function focusRow(row) {
    if (!row) return;
    lastRow = row;
    row.focus({ preventScroll: true });
    // Into view vertically only: a sideways scroll would hide the row's first column.
    var box = row.getBoundingClientRect(), view = window.innerHeight;
    if (box.top < 0 || box.height > view) window.scrollBy(0, box.top - 8);
    else if (box.bottom > view) window.scrollBy(0, box.bottom - view + 8);
  }
  function move(step) {
    var all = rows(), index = all.indexOf(current());
    if (!all.length) return;
    if (index < 0) index = step > 0 ? -1 : all.length;
    focusRow(all[Math.min(Math.max(index + step, 0), all.length - 1)]);
  }
  function act(selector) {
    var row = current(), control = row && row.querySelector(selector);
    if (control) { lastRow = row; control.click(); }
  }
  function toggle(show) {
    var box = document.getElementById("shortcuts"), button = document.querySelector(".shortcuts-toggle");
    if (!box) return;
    box.hidden = show === undefined ? !box.hidden : !show;
    if (button) button.setAttribute("aria-expanded", String(!box.hidden));
  }
  var keys = {
    j: function () { move(1); },
    k: function () { move(-1); },
    a: function () { act('button[value="approve"]'); },
    r: function () { act('button[value="reject"]'); },
    e: function () { act("a[data-edit]"); },
    "?": function () { toggle(); }
  };
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest(".shortcuts-toggle")) toggle();
  });
  document.addEventListener("keydown", function (event) {
    if (!document.getElementById("shortcuts")) return; // only the review queue has shortcuts
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (event.key === "Escape") { toggle(false); return; }
    if (!keys[event.key]) return;
    event.preventDefault();
    keys[event.key]();
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt, row = elt.closest ? elt.closest("tr.proposal") : null;
    pending = row ? { id: row.id, decided: elt.hasAttribute("data-decide") } : null;
  });
  document.addEventListener("htmx:afterSettle", function () {
    var was = pending, row = was && document.getElementById(was.id);
    pending = null;
    if (!row) return;
    var field = row.classList.contains("editing") && row.querySelector("select, textarea, input:not([type=hidden])");
    if (field) { field.focus(); lastRow = row; return; }
    if (was.decided && row.getAttribute("data-status") !== "pending") {
      var all = rows();
      for (var i = all.indexOf(row) + 1; i < all.length; i++) {
        if (all[i].getAttribute("data-status") === "pending") { focusRow(all[i]); return; }
      }
    }
    focusRow(row);
  });
})();
/* HUD grid: j/k move the focus between commits (rows), Enter on a focused row opens its
   first red cell, else its first cell; h/l move between a row's cells, whose details
   (job, status, attempt, times, tests, log link) show on focus as on hover, and j/k from a
   cell keep its column. Esc hides the details. Ignored while typing in a field. */
(function () {
  function cellLinks(row) { return Array.prototype.slice.call(row.querySelectorAll("td.cell > a")); }
  function place(cell) {
    // The details are fixed to the viewport (the grid scrolls in its own box and would
    // clip them): under the cell (over it when there is no room below), on screen.
    var tip = cell && cell.querySelector(".hud-tip");
    if (!tip) return;
    cell.classList.remove("tip-hidden");
    var box = cell.getBoundingClientRect(), width = tip.offsetWidth, height = tip.offsetHeight;
    var top = box.bottom + 2;
    if (top + height > window.innerHeight - 4) top = Math.max(4, box.top - height - 2);
    tip.style.left = Math.max(4, Math.min(box.left, window.innerWidth - width - 4)) + "px";
    tip.style.top = top + "px";
  }
  function over(event) {
    var cell = event.target.closest && event.target.closest("table.hud td.cell");
    if (cell) place(cell);
  }
  document.addEventListener("mouseover", over);
  document.addEventListener("focusin", over);
  function show(link) {
    if (!link) return;
    link.focus();
    link.closest("tr").scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (event) {
    var table = document.querySelector("table.hud");
    if (!table || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable]")) return;
    var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr.hud-row"));
    var focused = document.activeElement;
    var active = focused && focused.closest ? focused.closest("tr.hud-row") : null;
    var cell = focused && focused.closest ? focused.closest("td.cell") : null;
    var current = rows.indexOf(active);
    if (event.key === "Escape" && cell) {
      cell.classList.add("tip-hidden");
    } else if ((event.key === "j" || event.key === "k") && rows.length) {
      var next = current < 0 ? 0 : Math.max(0, Math.min(rows.length - 1, current + (event.key === "j" ? 1 : -1)));
      var column = cell ? Array.prototype.indexOf.call(active.children, cell) : -1;
      var target = column > 0 ? rows[next].children[column] : null;
      if (target && target.querySelector("a")) show(target.querySelector("a"));
      else { rows[next].focus(); rows[next].scrollIntoView({ block: "nearest" }); }
      event.preventDefault();
    } else if ((event.key === "l" || event.key === "h") && active) {
      var links = cellLinks(active), at = links.indexOf(focused.closest("td.cell > a") ? focused : null);
      if (!links.length) return;
      if (at < 0) at = event.key === "l" ? -1 : links.length;
      show(links[Math.max(0, Math.min(links.length - 1, at + (event.key === "l" ? 1 : -1)))]);
      event.preventDefault();
    } else if (event.key === "Enter" && active && document.activeElement === active) {
      var link = active.querySelector("td.tone-red > a") || active.querySelector("td.cell > a");
      if (link) { event.preventDefault(); window.location.assign(link.href); }
    }
  });
  document.addEventListener("mouseout", function (event) {
    var cell = event.target.closest && event.target.closest("table.hud td.tip-hidden");
    if (cell && !cell.contains(event.relatedTarget)) cell.classList.remove("tip-hidden");
  });
})();
/* The header's test search: "/" puts the cursor in it (ignored while typing in a field). */
(function () {
  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable]")) return;
    var box = document.querySelector("form.test-search input");
    if (box) { event.preventDefault(); box.focus(); }
  });
})();
/* Log pages: f jumps to the failure, n and p turn the pages of a long log. Ignored while
   typing in a field. */
(function () {
  var keys = { f: "a[data-jump]", n: "a[rel=next]", p: "a[rel=prev]" };
  document.addEventListener("keydown", function (event) {
    if (!document.querySelector("[data-log]") || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable]")) return;
    var link = keys[event.key] && document.querySelector(keys[event.key]);
    if (!link) return;
    event.preventDefault();
    link.click();
  });
})();
/* Long identifiers (node ids, paths, op names, restrictions) in tables and lists may wrap
   only where their parts join: a <wbr> after each "_ . / : = , (" of a token of 16 characters
   or more. The server's HTML stays as written (a copy of the text is unchanged); CSS then
   never splits a word in the middle ("only_for=c uda"). Text in <pre> and in a nowrap box
   (a path cut with an ellipsis) is left alone. */
(function () {
  var WHERE = "td, th, ul.failures li, ul.unexpected li, .facts dd";
  var LONG = /\S{16,}/, JOINS = /(?<=[_.\/:=,(])(?=\w)/;
  function texts(root) {
    var found = [], walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      if (LONG.test(node.nodeValue) && JOINS.test(node.nodeValue)) found.push(node);
    }
    return found;
  }
  function breakable(root) {
    var boxes = root.querySelectorAll ? root.querySelectorAll(WHERE) : [];
    Array.prototype.forEach.call(boxes, function (box) {
      texts(box).forEach(function (node) {
        var parent = node.parentElement;
        if (!parent || parent.closest("pre, script, style, textarea, option")) return;
        if (getComputedStyle(parent).whiteSpace === "nowrap") return;
        var fragment = document.createDocumentFragment();
        node.nodeValue.split(JOINS).forEach(function (part, index) {
          if (index) fragment.appendChild(document.createElement("wbr"));
          fragment.appendChild(document.createTextNode(part));
        });
        parent.replaceChild(fragment, node);
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { breakable(document); });
  document.addEventListener("htmx:afterSettle", function (event) { breakable(event.detail.elt.parentNode || document); });
})();
