/* Make the visible sidebar toggles work (pydata-sphinx-theme 0.20 + sphinx-book-theme 1.4).
 *
 * pydata-sphinx-theme 0.17+ renders its own ☰ (.primary-toggle) and "On this page"
 * (.secondary-toggle) buttons in a header that sphinx-book-theme hides. Both themes'
 * scripts bind their click handlers with document.querySelector(), i.e. to those first,
 * hidden buttons, so the buttons a reader sees (in the article header) do nothing:
 * no chapter list and no in-page contents below 960 px, no collapsing sidebar on a
 * desktop. Upstream: pydata/pydata-sphinx-theme#2451, executablebooks/sphinx-book-theme#988.
 *
 * Workaround: a click on any other toggle is forwarded to the first one, which carries
 * the themes' handlers (a dialog on narrow screens, a collapsed sidebar on wide ones).
 * tests/test_reader.py::test_sidebar_toggles_* fails if a theme upgrade double-binds.
 */
(function () {
  function forward(selector) {
    const all = Array.from(document.querySelectorAll(selector));
    const bound = all[0];
    all.slice(1).forEach((button) => {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    });
  }
  function setup() {
    forward("button.primary-toggle");
    forward("button.secondary-toggle");
  }
  if (document.readyState !== "loading") setup();
  else document.addEventListener("DOMContentLoaded", setup);
})();
