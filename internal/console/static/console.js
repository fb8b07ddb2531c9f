// Refreshes the streams table every 5 seconds with the server-rendered (escaped)
// fragment; stops when the session ends.
(function () {
  var el = document.getElementById("streams");
  if (!el) return;
  var timer = setInterval(function () {
    fetch(el.dataset.refresh, { credentials: "same-origin", redirect: "error" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) { el.innerHTML = html; })
      .catch(function () { clearInterval(timer); });
  }, 5000);
})();
