/* Boxes that scroll sideways say so.
 *
 * Wide matrices, code, display equations and figures scroll inside their own box on a
 * phone. Without a hint a reader cannot tell that a table goes on to the right. This
 * script marks every such box that has hidden content on a side (class sa-more-right /
 * sa-more-left, updated as it scrolls); custom.css fades that edge out, so the cut-off
 * column is visibly cut off. tests/test_reader.py checks the fade on every scrollable box.
 */
(function () {
  const SELECTOR = [
    "div.highlight pre",
    "div.cell_output pre",
    ".selfattn-matrix",
    "div.math",
    ".selfattn-figure-scroll",
    ".pst-scrollable-table-container",
    ".table-wrapper",
  ].join(",");

  function mark(box) {
    const hidden = box.scrollWidth - box.clientWidth;
    const scrollable = hidden > 1;
    box.classList.toggle("sa-scrollable", scrollable);
    box.classList.toggle("sa-more-left", scrollable && box.scrollLeft > 1);
    box.classList.toggle("sa-more-right", scrollable && box.scrollLeft < hidden - 1);
  }

  function markAll() {
    document.querySelectorAll(SELECTOR).forEach((box) => {
      if (!box.dataset.saHint) {
        box.dataset.saHint = "1";
        box.addEventListener("scroll", () => mark(box), { passive: true });
      }
      mark(box);
    });
  }

  window.selfattnScrollHints = markAll;
  if (document.readyState !== "loading") markAll();
  else document.addEventListener("DOMContentLoaded", markAll);
  window.addEventListener("load", markAll);
  window.addEventListener("resize", markAll);
})();
