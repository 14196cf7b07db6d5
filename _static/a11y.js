/* Accessible names that match what is on screen (axe: label-content-name-mismatch).
 *
 * - The theme's search buttons show "Search Ctrl+K" but are labelled "Search".
 * - sphinx-togglebutton's hidden-cell summaries show "Show code cell source" but are
 *   labelled "Toggle hidden content".
 * Dropping the aria-label lets the visible text name the control.
 * - The bibliography's .citation-list is role="list" but its entries are
 *   doc-biblioentry, not listitems (axe: aria-required-children): drop the role.
 * tests/test_reader_a11y.py runs axe-core on every page.
 */
(function () {
  function fix() {
    document.querySelectorAll(".search-button-field[aria-label]").forEach((b) => {
      b.removeAttribute("aria-label");
    });
    document.querySelectorAll("details > summary[aria-label='Toggle hidden content']")
      .forEach((s) => s.removeAttribute("aria-label"));
    document.querySelectorAll(".citation-list[role='list']").forEach((l) => {
      l.removeAttribute("role");
    });
  }
  if (document.readyState !== "loading") fix();
  else document.addEventListener("DOMContentLoaded", fix);
})();
