/* Printing gives dark text on white paper, whatever the reader's colour mode.
 *
 * A page in dark mode (html[data-theme="dark"], set by the theme) printed light-grey
 * text, dark code boxes and dimmed figures. Browsers fire "beforeprint" before they lay
 * the page out for paper (Ctrl+P, the print menu, printing to PDF): the page switches to
 * the theme's light palette then, and back on "afterprint". The theme's own light
 * colours are used, not a copy of them (print.css used to carry ~100 of the theme's
 * variables, copied from pydata-sphinx-theme 0.20). tests/test_pdf.py prints three
 * pages in dark mode and checks the contrast of every text element.
 */
(function () {
  const root = document.documentElement;
  let onScreen = null;
  window.addEventListener("beforeprint", () => {
    if (root.dataset.theme !== "dark") return;
    onScreen = root.dataset.theme;
    root.dataset.theme = "light";
  });
  window.addEventListener("afterprint", () => {
    if (onScreen === null) return;
    root.dataset.theme = onScreen;
    onScreen = null;
  });
})();
