// py_reactor dashboard: the live view and the action confirmations. No dependencies.
//
// Every element with data-live="<url>" is refreshed in place every data-every ms: the URL
// returns the element's inner HTML (the page's own route with ?fragment=1). A refresh is
// skipped while the tab is hidden or while a form inside the element has focus.
(function () {
  "use strict";
  var indicator = document.getElementById("live-indicator");

  function refresh(el) {
    var url = el.getAttribute("data-live");
    var every = Number(el.getAttribute("data-every") || 2000);
    var schedule = function () { window.setTimeout(tick, every); };
    function tick() {
      if (document.hidden || el.contains(document.activeElement) && document.activeElement.tagName !== "BODY") {
        schedule();
        return;
      }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.setAttribute("data-refreshed", String(Date.now()));
          if (indicator) { indicator.classList.remove("stale"); indicator.title = "updated " + new Date().toLocaleTimeString(); }
        })
        .catch(function (error) {
          if (indicator) { indicator.classList.add("stale"); indicator.title = "refresh failed: " + error.message; }
        })
        .then(schedule);
    }
    schedule();
  }

  document.querySelectorAll("[data-live]").forEach(refresh);

  // Confirm an action before its form is posted (delegated: forms come and go with refreshes).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
})();
